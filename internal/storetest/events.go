package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
)

func appendEvent(t *testing.T, d Store, id, team, sandbox, typ string, at time.Time) int {
	t.Helper()
	n, err := d.AppendEvent(context.Background(), store.Event{ID: id, Team: team, SandboxID: sandbox, Type: typ, At: at,
		Body: fmt.Appendf(nil, `{"id":%q}`, id)})
	if err != nil {
		t.Fatalf("append %s: %v", id, err)
	}
	return n
}

func ids(evs []store.Event) []string {
	out := []string{}
	for _, e := range evs {
		out = append(out, e.ID)
	}
	return out
}

func eventsList(t *testing.T, d Store) {
	ctx := context.Background()
	t0 := time.Now().UTC()
	appendEvent(t, d, "e1", "a", "sb1", "sandbox.lifecycle.created", t0)
	appendEvent(t, d, "e2", "a", "sb2", "sandbox.lifecycle.created", t0)
	appendEvent(t, d, "e3", "a", "sb1", "sandbox.lifecycle.killed", t0) // same time: recording order decides
	appendEvent(t, d, "x1", "b", "sb1", "sandbox.lifecycle.created", t0)
	if _, err := d.AppendEvent(ctx, store.Event{ID: "bad", Team: "", Type: "t", At: t0}); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("event without a team: %v", err)
	}
	for _, tt := range []struct {
		name string
		team string
		f    store.EventFilter
		want []string
	}{
		{"newest first", "a", store.EventFilter{}, []string{"e3", "e2", "e1"}},
		{"oldest first", "a", store.EventFilter{Asc: true}, []string{"e1", "e2", "e3"}},
		{"one sandbox", "a", store.EventFilter{SandboxID: "sb1", Asc: true}, []string{"e1", "e3"}},
		{"types", "a", store.EventFilter{Types: []string{"sandbox.lifecycle.killed", "sandbox.lifecycle.paused"}}, []string{"e3"}},
		{"limit", "a", store.EventFilter{Limit: 2}, []string{"e3", "e2"}},
		{"offset", "a", store.EventFilter{Offset: 1, Limit: 1}, []string{"e2"}},
		{"offset past the end", "a", store.EventFilter{Offset: 5}, []string{}},
		{"another team", "b", store.EventFilter{SandboxID: "sb1"}, []string{"x1"}},
		{"no such team", "c", store.EventFilter{}, []string{}},
	} {
		got, err := d.ListEvents(ctx, tt.team, tt.f)
		if err != nil || !equal(ids(got), tt.want) {
			t.Errorf("%s: %v %v, want %v", tt.name, ids(got), err, tt.want)
		}
	}
	got, _ := d.ListEvents(ctx, "a", store.EventFilter{Limit: 1})
	if string(got[0].Body) != `{"id":"e3"}` || got[0].SandboxID != "sb1" || !got[0].At.Equal(t0) {
		t.Errorf("event read back: %+v", got[0])
	}
	if n, err := d.PruneEvents(ctx, t0.Add(time.Second)); err != nil || n != 4 {
		t.Fatalf("prune = %d, %v", n, err)
	}
}

func webhooksCRUD(t *testing.T, d Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	w := store.Webhook{ID: "w1", Team: "a", Name: "n", URL: "https://x.example/h", Enabled: true,
		Events: []string{"sandbox.lifecycle.created"}, Secret: "s", CreatedAt: now}
	if err := d.CreateWebhook(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := d.CreateWebhook(ctx, store.Webhook{ID: "w2", Team: "Bad Team"}); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("bad team: %v", err)
	}
	got, err := d.GetWebhook(ctx, "a", "w1")
	if err != nil || got.URL != w.URL || !got.Enabled || !equal(got.Events, w.Events) || got.Secret != "s" || !got.CreatedAt.Equal(now) {
		t.Fatalf("get = %+v, %v", got, err)
	}
	if _, err := d.GetWebhook(ctx, "b", "w1"); !errdefs.IsNotFound(err) {
		t.Fatalf("another team's webhook: %v", err)
	}
	w.Enabled, w.Events, w.URL = false, []string{"sandbox.lifecycle.killed", "sandbox.lifecycle.paused"}, "https://y.example/"
	if err := d.UpdateWebhook(ctx, w); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.GetWebhook(ctx, "a", "w1"); got.Enabled || len(got.Events) != 2 || got.URL != w.URL {
		t.Fatalf("after update: %+v", got)
	}
	other := w
	other.Team = "b"
	if err := d.UpdateWebhook(ctx, other); !errdefs.IsNotFound(err) {
		t.Fatalf("update another team's: %v", err)
	}
	if hs, err := d.ListWebhooks(ctx, "a"); err != nil || len(hs) != 1 {
		t.Fatalf("list = %v, %v", hs, err)
	}
	if hs, err := d.ListWebhooks(ctx, "b"); err != nil || len(hs) != 0 {
		t.Fatalf("list of another team = %v, %v", hs, err)
	}
	if err := d.DeleteWebhook(ctx, "b", "w1"); !errdefs.IsNotFound(err) {
		t.Fatalf("delete another team's: %v", err)
	}
	if err := d.DeleteWebhook(ctx, "a", "w1"); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteWebhook(ctx, "a", "w1"); !errdefs.IsNotFound(err) {
		t.Fatalf("second delete: %v", err)
	}
}

func deliveries(t *testing.T, d Store) {
	ctx := context.Background()
	t0 := time.Now().UTC()
	for _, w := range []store.Webhook{
		{ID: "all", Team: "a", URL: "https://a.example/", Enabled: true, Secret: "s1",
			Events: []string{"sandbox.lifecycle.created", "sandbox.lifecycle.killed"}},
		{ID: "kills", Team: "a", URL: "https://k.example/", Enabled: true, Secret: "s2", Events: []string{"sandbox.lifecycle.killed"}},
		{ID: "off", Team: "a", URL: "https://o.example/", Enabled: false, Secret: "s3", Events: []string{"sandbox.lifecycle.created"}},
		{ID: "other", Team: "b", URL: "https://b.example/", Enabled: true, Secret: "s4", Events: []string{"sandbox.lifecycle.created"}},
	} {
		w.CreatedAt = t0
		if err := d.CreateWebhook(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, err := d.NextDelivery(ctx); ok || err != nil {
		t.Fatalf("next delivery with none queued: %v %v", ok, err)
	}
	if n := appendEvent(t, d, "e1", "a", "sb1", "sandbox.lifecycle.created", t0); n != 1 {
		t.Fatalf("created queued %d deliveries, want 1 (all)", n)
	}
	if n := appendEvent(t, d, "e2", "a", "sb1", "sandbox.lifecycle.killed", t0.Add(time.Millisecond)); n != 2 {
		t.Fatalf("killed queued %d deliveries, want 2", n)
	}
	due, err := d.DueDeliveries(ctx, t0.Add(time.Second), 10)
	if err != nil || len(due) != 3 {
		t.Fatalf("due = %+v, %v", due, err)
	}
	if due[0].WebhookID != "all" || string(due[0].Body) != `{"id":"e1"}` || due[0].Secret != "s1" || due[0].URL != "https://a.example/" {
		t.Fatalf("first due = %+v", due[0])
	}
	if at, ok, err := d.NextDelivery(ctx); !ok || err != nil || !at.Equal(t0) {
		t.Fatalf("next = %v %v %v", at, ok, err)
	}
	// a failed attempt waits; a made one is gone
	if err := d.DeliveryFailed(ctx, due[0].ID, t0.Add(time.Hour), "503"); err != nil {
		t.Fatal(err)
	}
	if err := d.DeliveryDone(ctx, due[1].ID); err != nil {
		t.Fatal(err)
	}
	if now, _ := d.DueDeliveries(ctx, t0.Add(time.Second), 10); len(now) != 1 || now[0].ID != due[2].ID {
		t.Fatalf("due after one failure and one success = %+v", now)
	}
	later, _ := d.DueDeliveries(ctx, t0.Add(2*time.Hour), 10)
	if len(later) != 2 || later[0].Attempts != 1 {
		t.Fatalf("due later = %+v", later)
	}
	// deleting a webhook drops its deliveries; pruning an event drops the rest
	if err := d.DeleteWebhook(ctx, "a", "kills"); err != nil {
		t.Fatal(err)
	}
	if due, _ := d.DueDeliveries(ctx, t0.Add(2*time.Hour), 10); len(due) != 1 || due[0].WebhookID != "all" {
		t.Fatalf("due after the webhook's delete = %+v", due)
	}
	if _, err := d.PruneEvents(ctx, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := d.NextDelivery(ctx); ok {
		t.Fatal("a pruned event's delivery is still queued")
	}
}
