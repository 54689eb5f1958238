package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moatsh/moat/api/rest"
	"github.com/moatsh/moat/internal/events"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/orchestrator/orchestratortest"
	"github.com/moatsh/moat/internal/server"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/webhook"
	moat "github.com/moatsh/moat/sdk/go"
)

// newEventsHarness is newHarness with lifecycle events recorded and
// webhooks delivered (to loopback receivers too).
func newEventsHarness(t *testing.T) *harness {
	t.Helper()
	var hooks *webhook.Service
	env := orchestratortest.New(t, orchestrator.Config{MaxTimeout: time.Hour,
		Events: func(ctx context.Context, ev events.Event) { hooks.Record(ctx, ev) }})
	hooks = webhook.New(webhook.Config{Store: env.DB, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		FirstRetry: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { hooks.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	key, err := env.DB.CreateAPIKey(context.Background(), store.DefaultTeam)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(server.New(server.Config{Store: env.DB, Orch: env.Orch, Webhooks: hooks}))
	t.Cleanup(ts.Close)
	return &harness{t: t, url: ts.URL, key: key, env: env}
}

func eventTypes(t *testing.T, r resp) []string {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("events: %d %s", r.status, r.body)
	}
	var evs []events.Event
	r.json(t, &evs)
	out := []string{}
	for _, ev := range evs {
		out = append(out, strings.TrimPrefix(ev.Type, "sandbox.lifecycle."))
	}
	return out
}

// TestEventsAPI: a sandbox's life is listed by both routes, in order,
// filtered and paged as E2B's docs say, and to its team only.
func TestEventsAPI(t *testing.T) {
	h := newEventsHarness(t)
	id := h.create(`{"templateID":"base","metadata":{"who":"me"}}`)["sandboxID"].(string)
	p := "/sandboxes/" + id
	for _, c := range []struct{ method, path, body string }{
		{"POST", p + "/timeout", `{"timeout":120}`},
		{"PUT", p + "/network", `{"denyOut":["0.0.0.0/0"]}`},
		{"POST", p + "/pause", ``},
		{"POST", p + "/resume", `{"timeout":60}`},
		{"DELETE", p, ``},
	} {
		if r := h.do(c.method, c.path, c.body); r.status/100 != 2 {
			t.Fatalf("%s %s: %d %s", c.method, c.path, r.status, r.body)
		}
	}
	life := "created updated updated paused resumed killed"
	if got := strings.Join(eventTypes(t, h.do("GET", "/events/sandboxes/"+id+"?orderAsc=true", "")), " "); got != life {
		t.Fatalf("sandbox events %q, want %q", got, life)
	}
	if got := strings.Join(eventTypes(t, h.do("GET", "/events/sandboxes?limit=2", "")), " "); got != "killed resumed" {
		t.Fatalf("newest two %q", got)
	}
	if got := strings.Join(eventTypes(t, h.do("GET", "/events/sandboxes?orderAsc=true&offset=1&limit=2", "")), " "); got != "updated updated" {
		t.Fatalf("offset 1 limit 2 %q", got)
	}
	got := eventTypes(t, h.do("GET", "/events/sandboxes?types=sandbox.lifecycle.paused&types=sandbox.lifecycle.killed", ""))
	if strings.Join(got, " ") != "killed paused" {
		t.Fatalf("types filter %q", got)
	}
	if got := eventTypes(t, h.do("GET", "/events/sandboxes", "")); len(got) != 6 {
		t.Fatalf("default limit 10: %d events", len(got))
	}
	// the whole event, as E2B shows it
	var evs []map[string]any
	h.do("GET", "/events/sandboxes/"+id+"?limit=1", "").json(t, &evs)
	ev := evs[0]
	if ev["sandboxId"] != id || ev["sandboxTeamId"] != store.DefaultTeam || ev["version"] != "v2" ||
		ev["eventLabel"] != "kill" || ev["sandboxTemplateId"] != "tplbase" || ev["id"] == "" {
		t.Fatalf("event %v", ev)
	}
	if data, _ := ev["eventData"].(map[string]any); data["kill_reason"] != "request" ||
		data["sandbox_metadata"].(map[string]any)["who"] != "me" {
		t.Fatalf("eventData %v", ev["eventData"])
	}
	// another team sees nothing of it
	other := h.keyFor("other")
	for _, path := range []string{"/events/sandboxes", "/events/sandboxes/" + id} {
		if r := h.doKey("GET", path, "", other); r.status != 200 || string(r.body) != "[]\n" {
			t.Fatalf("another team's %s: %d %s", path, r.status, r.body)
		}
	}
	for _, q := range []string{"limit=0", "limit=101", "limit=x", "offset=-1", "orderAsc=maybe",
		"types=sandbox.lifecycle.exploded", "types=create"} {
		h.do("GET", "/events/sandboxes?"+q, "").errBody(t, 400)
	}
	h.doKey("GET", "/events/sandboxes", "", "").errBody(t, 401)
}

// TestWebhooksAPI: the registry's routes, their errors, and teams.
func TestWebhooksAPI(t *testing.T) {
	h := newEventsHarness(t)
	r := h.do("POST", "/events/webhooks", `{"name":"n","url":"https://hooks.example.com/x","events":["sandbox.lifecycle.created"],"signatureSecret":"s"}`)
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	if strings.Contains(string(r.body), `"s"`) || strings.Contains(string(r.body), "signatureSecret") {
		t.Fatalf("the secret came back: %s", r.body)
	}
	var w map[string]any
	r.json(t, &w)
	id, _ := w["id"].(string)
	if id == "" || w["enabled"] != true || w["teamId"] != store.DefaultTeam || w["createdAt"] == nil {
		t.Fatalf("webhook %v", w)
	}
	for _, body := range []string{
		`{"url":"https://hooks.example.com/x","events":["sandbox.lifecycle.created"]}`,                         // no secret
		`{"url":"https://hooks.example.com/x","events":[],"signatureSecret":"s"}`,                              // no events
		`{"url":"https://hooks.example.com/x","events":["sandbox.lifecycle.exploded"],"signatureSecret":"s"}`,  // unknown event
		`{"url":"ftp://hooks.example.com/x","events":["sandbox.lifecycle.created"],"signatureSecret":"s"}`,     // scheme
		`{"url":"http://169.254.169.254/latest","events":["sandbox.lifecycle.created"],"signatureSecret":"s"}`, // metadata service
		`{"url":"http://10.11.0.2:49983/","events":["sandbox.lifecycle.created"],"signatureSecret":"s"}`,       // a sandbox
		`{"url":"https://hooks.example.com/` + strings.Repeat("x", 3000) + `","events":["sandbox.lifecycle.created"],"signatureSecret":"s"}`,
		`{"url":`, `[]`,
	} {
		h.do("POST", "/events/webhooks", body).errBody(t, 400)
	}
	path := "/events/webhooks/" + id
	if r := h.do("PATCH", path, `{"enabled":false,"events":["sandbox.lifecycle.killed","sandbox.lifecycle.killed"]}`); r.status != 200 {
		t.Fatalf("patch: %d %s", r.status, r.body)
	}
	h.do("GET", path, "").json(t, &w)
	if w["enabled"] != false || len(w["events"].([]any)) != 1 || w["url"] != "https://hooks.example.com/x" || w["name"] != "n" {
		t.Fatalf("after patch %v", w)
	}
	h.do("PATCH", path, `{"events":["nope"]}`).errBody(t, 400)
	h.do("PATCH", path, `{"signatureSecret":""}`).errBody(t, 400)
	var list []map[string]any
	h.do("GET", "/events/webhooks", "").json(t, &list)
	if len(list) != 1 || list[0]["id"] != id {
		t.Fatalf("list %v", list)
	}
	other := h.keyFor("other")
	h.doKey("GET", path, "", other).errBody(t, 404)
	h.doKey("PATCH", path, `{"enabled":true}`, other).errBody(t, 404)
	h.doKey("DELETE", path, "", other).errBody(t, 404)
	if r := h.doKey("GET", "/events/webhooks", "", other); string(r.body) != "[]\n" {
		t.Fatalf("another team's list: %s", r.body)
	}
	if r := h.do("DELETE", path, ""); r.status != 200 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	h.do("DELETE", path, "").errBody(t, 404)
	h.do("GET", "/events/webhooks/nope", "").errBody(t, 404)
}

// TestWebhookDelivery: a registered receiver gets the sandbox's events it
// subscribed to, signed with its secret; a disabled one gets none.
func TestWebhookDelivery(t *testing.T) {
	h := newEventsHarness(t)
	var mu sync.Mutex
	var got []string
	arrived := make(chan struct{}, 10)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if sig := r.Header.Get("e2b-signature"); sig != events.Signature("k3y", body) {
			t.Errorf("bad signature %q", sig)
		}
		var ev events.Event
		_ = json.Unmarshal(body, &ev)
		mu.Lock()
		got = append(got, ev.Type)
		mu.Unlock()
		arrived <- struct{}{}
	}))
	defer recv.Close()
	for _, body := range []string{
		`{"url":"` + recv.URL + `/a","events":["sandbox.lifecycle.created","sandbox.lifecycle.killed"],"signatureSecret":"k3y"}`,
		`{"url":"` + recv.URL + `/off","enabled":false,"events":["sandbox.lifecycle.created"],"signatureSecret":"k3y"}`,
	} {
		if r := h.do("POST", "/events/webhooks", body); r.status != 201 {
			t.Fatalf("register: %d %s", r.status, r.body)
		}
	}
	id := h.create(`{"templateID":"base"}`)["sandboxID"].(string)
	h.do("DELETE", "/sandboxes/"+id, "")
	for range 2 {
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("deliveries: %v", got)
		}
	}
	// both are recorded as made (the store's conformance suite checks that
	// a disabled webhook is owed nothing)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, queued, err := h.env.DB.NextDelivery(context.Background())
		if err != nil || (queued && time.Now().After(deadline)) {
			t.Fatalf("a delivery is still queued (%v)", err)
		}
		if !queued {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(got, " ") != events.Created+" "+events.Killed {
		t.Fatalf("receiver got %v", got)
	}
}

// TestEventsThroughGoSDK: sdk/go's events and webhook calls against the
// server.
func TestEventsThroughGoSDK(t *testing.T) {
	h := newEventsHarness(t)
	c := &moat.Client{APIURL: h.url, APIKey: h.key}
	ctx := context.Background()
	name := "go"
	w, err := c.CreateWebhook(ctx, moat.NewWebhook{Name: &name, Url: "https://hooks.example.com/go",
		Events: []rest.SandboxEventType{rest.SandboxLifecycleKilled}, SignatureSecret: "s"})
	if err != nil || w.Id == "" || !w.Enabled {
		t.Fatalf("create webhook: %+v, %v", w, err)
	}
	off := false
	if w, err = c.UpdateWebhook(ctx, w.Id, rest.WebhookUpdate{Enabled: &off}); err != nil || w.Enabled {
		t.Fatalf("update webhook: %+v, %v", w, err)
	}
	if ws, err := c.Webhooks(ctx); err != nil || len(ws) != 1 {
		t.Fatalf("webhooks: %v, %v", ws, err)
	}
	id := h.create(`{"templateID":"base"}`)["sandboxID"].(string)
	h.do("DELETE", "/sandboxes/"+id, "")
	evs, err := c.Events(ctx, id, moat.EventQuery{Asc: true, Types: []string{events.Created, events.Killed}})
	if err != nil || len(evs) != 2 || evs[0].Type != events.Created || evs[1].Type != events.Killed || evs[1].SandboxId != id {
		t.Fatalf("events: %+v, %v", evs, err)
	}
	if evs, err := c.Events(ctx, "", moat.EventQuery{Limit: 1}); err != nil || len(evs) != 1 || evs[0].Type != events.Killed {
		t.Fatalf("the team's newest event: %+v, %v", evs, err)
	}
	if _, err := c.Events(ctx, "", moat.EventQuery{Limit: 101}); !errors.Is(err, moat.ErrInvalidArgument) {
		t.Fatalf("limit 101: %v", err)
	}
	if err := c.DeleteWebhook(ctx, w.Id); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteWebhook(ctx, w.Id); !errors.Is(err, moat.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}
