package store

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/errdefs"
)

// TestTeamsMigrationKeepsExistingRowsInDefault builds a database as the
// version before teams left it (schema 2, with a key, a sandbox and a
// snapshot), opens it, and checks that everything landed in the default
// team and that the old key still authenticates.
func TestTeamsMigrationKeepsExistingRowsInDefault(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "moat.db")
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"migrations/0001_init.sql", "migrations/0002_pause_snapshots.sql"} {
		body, err := migrations.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Exec(string(body)); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	const oldKey = "e2b_0123456789012345678901234567890123456789"
	for _, q := range []string{
		`CREATE TABLE schema_version (version INTEGER NOT NULL)`,
		`INSERT INTO schema_version (version) VALUES (1), (2)`,
		`INSERT INTO api_keys (hash, prefix, created_at) VALUES ('` + hashKey(oldKey) + `', 'e2b_012345', 1)`,
		`INSERT INTO sandboxes (id, template_id, state, started_at, end_at) VALUES ('iold', 't', 'running', 1, 2)`,
		`INSERT INTO snapshots (id, name, sandbox_id, template_id, runtime, created_at) VALUES ('snapold', 'keep', 'iold', 't', 'vm', 1)`,
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
	if v, err := d.SchemaVersion(ctx); err != nil || v < 3 {
		t.Fatalf("schema version = %d, %v", v, err)
	}
	if team, ok, err := d.CheckAPIKey(ctx, oldKey); err != nil || !ok || team != DefaultTeam {
		t.Fatalf("old key: team %q ok %v err %v", team, ok, err)
	}
	if sb, err := d.GetSandbox(ctx, "iold"); err != nil || sb.Team != DefaultTeam {
		t.Fatalf("old sandbox: %+v, %v", sb, err)
	}
	if sn, err := d.GetSnapshot(ctx, DefaultTeam, "keep"); err != nil || sn.ID != "snapold" || sn.Team != DefaultTeam {
		t.Fatalf("old snapshot: %+v, %v", sn, err)
	}
	if rows, err := d.ListSandboxes(ctx, SandboxFilter{Team: DefaultTeam}); err != nil || len(rows) != 1 {
		t.Fatalf("default team's sandboxes: %v, %v", rows, err)
	}
}

func TestValidateTeam(t *testing.T) {
	ctx := context.Background()
	d := openTest(t)
	for _, tc := range []struct {
		team string
		ok   bool
	}{
		{"default", true}, {"a", true}, {"0", true}, {"team_b-2", true}, {strings.Repeat("a", 63), true},
		{"", false}, {"-a", false}, {"_a", false}, {"A", false}, {"a b", false}, {"a/b", false},
		{"é", false}, {strings.Repeat("a", 64), false}, {"a\n", false},
	} {
		err := ValidateTeam(tc.team)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateTeam(%q) = %v, want ok %v", tc.team, err, tc.ok)
		}
		_, cerr := d.CreateAPIKey(ctx, tc.team)
		if tc.ok && cerr != nil {
			t.Errorf("CreateAPIKey(%q) = %v", tc.team, cerr)
		}
		if !tc.ok && (!errors.Is(cerr, errdefs.ErrInvalidArgument) || !strings.Contains(cerr.Error(), "invalid team name")) {
			t.Errorf("CreateAPIKey(%q) = %v, want a clear invalid-argument error", tc.team, cerr)
		}
	}
}
