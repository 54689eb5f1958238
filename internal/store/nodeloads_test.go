package store

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/testkit/pgtest"
)

// TestNodeLoadsMigration: migration 0014 run on a database whose
// sandboxes were written before it (its table, triggers and functions
// dropped again) gives the loads of those sandboxes, and later writes keep
// them, on SQLite and on PostgreSQL.
func TestNodeLoadsMigration(t *testing.T) {
	engines := map[string]struct {
		loc  func(t *testing.T) string
		undo []string
	}{
		"sqlite": {func(t *testing.T) string { return filepath.Join(t.TempDir(), "moat.db") }, []string{
			`DROP TRIGGER sandboxes_load_insert`, `DROP TRIGGER sandboxes_load_delete`, `DROP TRIGGER sandboxes_load_update`,
			`DROP TABLE node_loads`}},
		"postgresql": {func(t *testing.T) string { return pgtest.Start(t).NewDB(t) }, []string{
			`DROP TRIGGER sandboxes_load_insert ON sandboxes`, `DROP TRIGGER sandboxes_load_delete ON sandboxes`,
			`DROP TRIGGER sandboxes_load_update ON sandboxes`, `DROP FUNCTION sandboxes_node_load()`,
			`DROP FUNCTION node_load_add(TEXT, BIGINT, BIGINT)`, `DROP TABLE node_loads`}},
	}
	for name, e := range engines {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			d, err := Open(ctx, e.loc(t))
			if err != nil {
				t.Fatal(err)
			}
			if err := d.RegisterNode(ctx, Node{ID: "n1", MemoryMB: 1024, LeaseUntil: time.Now().Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			for _, q := range e.undo {
				if _, err := d.w.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			for i, st := range []State{StateRunning, StateRunning, StatePaused} {
				s := Sandbox{ID: string(rune('a' + i)), Team: "t", TemplateID: "t", State: st, MemoryMB: 256, NodeID: "n1"}
				if err := d.InsertSandbox(ctx, s); err != nil {
					t.Fatal(err)
				}
			}
			defer d.Close()
			body, err := migrations.ReadFile(d.migrations + "/0014_node_loads.sql")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.w.ExecContext(ctx, string(body)); err != nil {
				t.Fatal(err)
			}
			checkLoad(t, d, "after the migration", 512, 2)
			if err := d.InsertSandbox(ctx, Sandbox{ID: "d", Team: "t", TemplateID: "t", State: StateRunning, MemoryMB: 128, NodeID: "n1"}); err != nil {
				t.Fatal(err)
			}
			if err := d.DeleteSandbox(ctx, "a"); err != nil {
				t.Fatal(err)
			}
			checkLoad(t, d, "after an insert and a delete", 384, 2)
		})
	}
}

func checkLoad(t *testing.T, d *DB, when string, mb, n int) {
	t.Helper()
	loads, err := d.NodeLoads(context.Background())
	if err != nil || len(loads) != 1 || loads[0].ReservedMB != mb || loads[0].Sandboxes != n {
		t.Fatalf("loads %s: %+v, %v; want n1 with %d MiB in %d sandboxes", when, loads, err, mb, n)
	}
}
