package store

import (
	"context"
	"database/sql"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestNetworkMigration opens a database as schema 3 left it, with a
// sandbox: the sandbox has no network policy; a policy written afterwards
// reads back, in Get and List, and an update can clear it again.
func TestNetworkMigration(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "moat.db")
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"migrations/0001_init.sql", "migrations/0002_pause_snapshots.sql", "migrations/0003_teams.sql"} {
		body, err := migrations.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Exec(string(body)); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	for _, q := range []string{
		`CREATE TABLE schema_version (version INTEGER NOT NULL)`,
		`INSERT INTO schema_version (version) VALUES (1), (2), (3)`,
		`INSERT INTO sandboxes (id, template_id, state, started_at, end_at) VALUES ('iold', 't', 'running', 1, 2)`,
	} {
		if _, err := raw.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	raw.Close()
	d, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if v, err := d.SchemaVersion(ctx); err != nil || v != latestMigration(t) {
		t.Fatalf("schema version = %d, %v", v, err)
	}
	old, err := d.GetSandbox(ctx, "iold")
	if err != nil || !old.Network.IsZero() {
		t.Fatalf("old sandbox: %+v, %v", old, err)
	}
	want := Network{AllowOut: []string{"1.2.3.4/32", "api.example.com"}, DenyOut: []string{"0.0.0.0/0"}, TrafficAccessToken: "tok",
		Rules: []NetworkRule{{Domain: "api.example.com", Headers: map[string]string{"Authorization": "Bearer ${e2b.secrets.k}"}},
			{Domain: "api.example.com", Headers: map[string]string{"X-B": "b"}}}}
	sb := Sandbox{ID: "inew", Team: DefaultTeam, TemplateID: "t", State: StateRunning, StartedAt: time.Now(),
		EndAt: time.Now().Add(time.Minute), Network: want}
	if err := d.InsertSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	same := func(a, b Network) bool {
		return slices.Equal(a.AllowOut, b.AllowOut) && slices.Equal(a.DenyOut, b.DenyOut) && a.TrafficAccessToken == b.TrafficAccessToken &&
			slices.EqualFunc(a.Rules, b.Rules, func(x, y NetworkRule) bool { return x.Domain == y.Domain && maps.Equal(x.Headers, y.Headers) })
	}
	if got, err := d.GetSandbox(ctx, "inew"); err != nil || !same(got.Network, want) {
		t.Fatalf("get: %+v, %v", got.Network, err)
	}
	rows, err := d.ListSandboxes(ctx, SandboxFilter{Team: DefaultTeam})
	if err != nil || len(rows) != 2 {
		t.Fatalf("list: %v, %v", rows, err)
	}
	for _, r := range rows {
		if r.ID == "inew" && !same(r.Network, want) {
			t.Fatalf("list: %+v", r.Network)
		}
	}
	old.Network = Network{DenyOut: []string{"10.0.0.0/8"}}
	if err := d.UpdateSandbox(ctx, old); err != nil {
		t.Fatal(err)
	}
	sb.Network = Network{}
	if err := d.UpdateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.GetSandbox(ctx, "iold"); !same(got.Network, old.Network) {
		t.Fatalf("updated old: %+v", got.Network)
	}
	if got, _ := d.GetSandbox(ctx, "inew"); !got.Network.IsZero() {
		t.Fatalf("cleared: %+v", got.Network)
	}
}
