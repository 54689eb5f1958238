package clustersim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/pgserver"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/testkit"
)

func startEnv(t testing.TB) *Env {
	t.Helper()
	e, err := Start(context.Background())
	if errors.Is(err, pgserver.ErrMissing) {
		testkit.Missing(t, "PostgreSQL (Debian package postgresql-15: /usr/lib/postgresql/*/bin/postgres)")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// TestSimulation runs the bench small, with room for fewer sandboxes
// than it creates: 3 nodes of 2 GiB (8 GiB each with the overcommit of
// 4: 16 sandboxes of 512 MiB), 50 creates from 8 clients through two
// front doors. Every created sandbox's row names a registered node, no
// node holds more than its room, the nodes are full (48 created, 2
// refused with 503), the table prints, and the statements were counted.
func TestSimulation(t *testing.T) {
	ctx := context.Background()
	e := startEnv(t)
	res, err := e.Run(ctx, Config{Nodes: 3, Sandboxes: 50, Fronts: 2, Concurrency: 8, NodeMemoryMB: 2048})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	PrintTable(&out, []Result{res})
	PrintStatements(&out, res, 12)
	t.Log("\n" + out.String())
	if res.Created != 48 || res.Refused != 2 || res.Failed != 0 {
		t.Fatalf("created %d, refused %d, failed %d (%s); want 48 created and 2 refused", res.Created, res.Refused, res.Failed, res.FirstError)
	}
	db, err := store.Open(ctx, res.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	checkRows(t, db, res)
	if res.Stmts.Create == 0 || res.PerCreate() < 5 {
		t.Errorf("statements per create = %.1f (%d in all); want the create path's (at least 5)", res.PerCreate(), res.Stmts.Create)
	}
	if !strings.Contains(out.String(), "stmts/create") {
		t.Errorf("table:\n%s", out.String())
	}
}

// checkRows: every sandbox row is on a registered node, no node is past
// MemoryMB × overcommit, and the rows are as many as the creates.
func checkRows(t *testing.T, db *store.DB, res Result) {
	t.Helper()
	ctx := context.Background()
	nodes, err := db.ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	capOf := map[string]int{}
	for _, n := range nodes {
		capOf[n.ID] = int(float64(n.MemoryMB) * res.Overcommit)
	}
	if len(nodes) != res.Nodes {
		t.Fatalf("%d nodes registered; want %d", len(nodes), res.Nodes)
	}
	sbs, err := db.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(sbs) != res.Created {
		t.Fatalf("%d sandbox rows; want %d (one per create)", len(sbs), res.Created)
	}
	held := map[string]int{}
	for _, s := range sbs {
		if _, ok := capOf[s.NodeID]; !ok {
			t.Errorf("sandbox %s is on %q, not a registered node", s.ID, s.NodeID)
		}
		held[s.NodeID] += s.MemoryMB
	}
	for id, mb := range held {
		if mb > capOf[id] {
			t.Errorf("node %s holds %d MiB; its room is %d MiB", id, mb, capOf[id])
		}
	}
	if len(held) != res.Nodes {
		t.Errorf("sandboxes on %d nodes (%v); want every one of the %d", len(held), held, res.Nodes)
	}
}

// BenchmarkCluster prints the cost curve: MOAT_BENCH_CLUSTER_M (default
// 2000) creates through 2 front doors with 10, 100 and 500 nodes
// (MOAT_BENCH_CLUSTER_NODES, a comma list).
func BenchmarkCluster(b *testing.B) {
	m := 2000
	if v, err := strconv.Atoi(os.Getenv("MOAT_BENCH_CLUSTER_M")); err == nil && v > 0 {
		m = v
	}
	ns := []int{10, 100, 500}
	if v := os.Getenv("MOAT_BENCH_CLUSTER_NODES"); v != "" {
		ns = nil
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				b.Fatal(err)
			}
			ns = append(ns, n)
		}
	}
	e := startEnv(b)
	var rs []Result
	for _, n := range ns {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			res, err := e.Run(context.Background(), Config{Nodes: n, Sandboxes: m})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(res.PerSecond(), "creates/s")
			b.ReportMetric(res.PerCreate(), "stmts/create")
			rs = append(rs, res)
		})
	}
	PrintTable(os.Stdout, rs)
}
