package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
)

func sandboxCRUD(t *testing.T, d Store) {
	ctx := context.Background()
	start := time.Now().UTC().Truncate(time.Millisecond)
	s := store.Sandbox{ID: "iabc", Team: "t1", TemplateID: "t", Alias: "base", State: store.StateRunning, StartedAt: start,
		EndAt: start.Add(time.Minute), Metadata: map[string]string{"a": "b"}, Secure: true,
		AllowInternet: true, CPUCount: 2, MemoryMB: 512, DiskSizeMB: 1024, EnvdAccessToken: "tok"}
	if err := d.InsertSandbox(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := d.InsertSandbox(ctx, s); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("duplicate: %v", err)
	}
	got, err := d.GetSandbox(ctx, "iabc")
	if err != nil {
		t.Fatal(err)
	}
	if !got.StartedAt.Equal(start) || got.Team != "t1" || got.Metadata["a"] != "b" || got.EnvVars == nil || !got.Secure || got.AutoPause {
		t.Fatalf("got %+v", got)
	}
	got.State = store.StatePaused
	if err := d.UpdateSandbox(ctx, got); err != nil {
		t.Fatal(err)
	}
	if err := d.UpdateSandbox(ctx, store.Sandbox{ID: "nope"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("update missing: %v", err)
	}
	if err := d.InsertSandbox(ctx, store.Sandbox{ID: "noteam", TemplateID: "t", State: store.StateRunning}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("insert without team: %v", err)
	}
	if g, _ := d.GetSandbox(ctx, "iabc"); g.State != store.StatePaused || g.Team != "t1" {
		t.Fatalf("state %q", g.State)
	}
	if err := d.DeleteSandbox(ctx, "iabc"); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteSandbox(ctx, "iabc"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.GetSandbox(ctx, "iabc"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
}

func listSandboxes(t *testing.T, d Store) {
	ctx := context.Background()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rows := []store.Sandbox{
		{ID: "a1", Team: "x", TemplateID: "t1", Alias: "base", State: store.StateRunning, StartedAt: base, Metadata: map[string]string{"env": "x"}},
		{ID: "a2", Team: "y", TemplateID: "t1", Alias: "base", State: store.StatePaused, StartedAt: base.Add(time.Second)},
		{ID: "a3", Team: "x", TemplateID: "t2", Alias: "ci", State: store.StateRunning, StartedAt: base.Add(time.Second), Metadata: map[string]string{"env": "x", "k": "v"}},
		{ID: "a4", Team: "y", TemplateID: "t2", Alias: "ci", State: store.StateRunning, StartedAt: base.Add(2 * time.Second)},
	}
	for _, r := range rows {
		if err := d.InsertSandbox(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(ss []store.Sandbox) (out []string) {
		for _, s := range ss {
			out = append(out, s.ID)
		}
		return out
	}
	tests := []struct {
		name string
		f    store.SandboxFilter
		want []string
	}{
		{"all desc", store.SandboxFilter{}, []string{"a4", "a2", "a3", "a1"}},
		{"all asc", store.SandboxFilter{Order: "asc"}, []string{"a1", "a3", "a2", "a4"}},
		{"team x", store.SandboxFilter{Team: "x"}, []string{"a3", "a1"}},
		{"team y running", store.SandboxFilter{Team: "y", States: []store.State{store.StateRunning}}, []string{"a4"}},
		{"team x metadata", store.SandboxFilter{Team: "x", Metadata: map[string]string{"k": "v"}}, []string{"a3"}},
		{"team z", store.SandboxFilter{Team: "z"}, nil},
		{"running", store.SandboxFilter{States: []store.State{store.StateRunning}}, []string{"a4", "a3", "a1"}},
		{"metadata", store.SandboxFilter{Metadata: map[string]string{"env": "x"}}, []string{"a3", "a1"}},
		{"metadata 2 keys", store.SandboxFilter{Metadata: map[string]string{"env": "x", "k": "v"}}, []string{"a3"}},
		{"template alias", store.SandboxFilter{Template: "ci"}, []string{"a4", "a3"}},
		{"template id", store.SandboxFilter{Template: "t1"}, []string{"a2", "a1"}},
		{"started after inclusive", store.SandboxFilter{StartedAfter: base.Add(time.Second)}, []string{"a4", "a2", "a3"}},
		{"limit", store.SandboxFilter{Limit: 2}, []string{"a4", "a2"}},
		{"cursor desc", store.SandboxFilter{Cursor: &store.Cursor{StartedAt: base.Add(time.Second), ID: "a2"}}, []string{"a3", "a1"}},
		{"cursor asc", store.SandboxFilter{Order: "asc", Cursor: &store.Cursor{StartedAt: base.Add(time.Second), ID: "a3"}}, []string{"a2", "a4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := d.ListSandboxes(ctx, tt.f)
			if err != nil {
				t.Fatal(err)
			}
			if g := ids(got); len(g) != len(tt.want) || (len(g) > 0 && !equal(g, tt.want)) {
				t.Fatalf("got %v, want %v", g, tt.want)
			}
		})
	}
}

func sandboxAutoResumeAndTimeout(t *testing.T, d Store) {
	ctx := context.Background()
	now := time.Now().UTC()
	sb := store.Sandbox{ID: "ar1", Team: store.DefaultTeam, TemplateID: "t", State: store.StateRunning, StartedAt: now, EndAt: now.Add(time.Minute),
		AutoPause: true, AutoResume: true, Timeout: 90 * time.Second, AutoPauseFilesystem: true}
	if err := d.InsertSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	got, err := d.GetSandbox(ctx, "ar1")
	if err != nil || !got.AutoResume || got.Timeout != 90*time.Second || !got.AutoPauseFilesystem || got.PausedFilesystem {
		t.Fatalf("got %+v, %v", got, err)
	}
	got.AutoResume, got.Timeout, got.AutoPauseFilesystem, got.PausedFilesystem = false, 5*time.Second, false, true
	if err := d.UpdateSandbox(ctx, got); err != nil {
		t.Fatal(err)
	}
	if got, _ = d.GetSandbox(ctx, "ar1"); got.AutoResume || got.Timeout != 5*time.Second || got.AutoPauseFilesystem || !got.PausedFilesystem {
		t.Fatalf("after update %+v", got)
	}
}
