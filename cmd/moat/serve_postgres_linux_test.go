package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/testkit/pgtest"
	moat "github.com/moatsh/moat/sdk/go"
)

// pgWithBase starts a private PostgreSQL (pgtest) with a new database
// whose store knows the template "base" of the CI cache, and returns the
// server and the database's URL; it needs what a real server needs.
func pgWithBase(t *testing.T) (*pgtest.Server, string) {
	t.Helper()
	rootfs := requireRealServer(t)
	pg := pgtest.Start(t)
	dsn := pg.NewDB(t)
	db, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.UpsertTemplate(context.Background(), store.Template{Name: "base", RootfsDir: rootfs}); err != nil {
		t.Fatal(err)
	}
	return pg, dsn
}

// TestServePostgres runs the real `moat serve --store postgres://...` on a
// private PostgreSQL: a sandbox from "base" runs commands, its row is in
// PostgreSQL (and nothing in DATA-DIR/moat.db), and a restarted server
// finds it again and still runs commands in it.
func TestServePostgres(t *testing.T) {
	_, dsn := pgWithBase(t)
	ctx := context.Background()
	dataDir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dataDir), 0o711); err != nil {
		t.Fatal(err)
	}

	s := startServerArgs(t, dataDir, []string{"--store", dsn, "--node-id", "node-a"})
	if s.key == "" {
		t.Fatalf("no API key printed for the new database:\n%s", s.out.String())
	}
	sb := s.createSandbox(t)
	if got := runIn(t, sb, "echo pg-$((6*7))"); !strings.Contains(got, "pg-42") {
		t.Fatalf("run: %q", got)
	}
	var state string
	if err := pgtest.Open(t, dsn).QueryRowContext(ctx, `SELECT state FROM sandboxes WHERE id = $1`, sb.ID).Scan(&state); err != nil || state != "running" {
		t.Fatalf("sandbox row in PostgreSQL: %q, %v", state, err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "moat.db")); err == nil {
		t.Error("the server made DATA-DIR/moat.db although its store is PostgreSQL")
	}
	// The server is a node of the registry, and its sandbox's row says so.
	var node string
	if err := pgtest.Open(t, dsn).QueryRowContext(ctx, `SELECT node_id FROM sandboxes WHERE id = $1`, sb.ID).Scan(&node); err != nil || node != "node-a" {
		t.Fatalf("node of the sandbox row: %q, %v", node, err)
	}
	out, _, code, err := runCLI("cluster", "nodes", "--store", dsn)
	if err != nil || code != 0 || !strings.Contains(out, "node-a") || !strings.Contains(out, "alive") || !strings.Contains(out, "container") {
		t.Fatalf("moat cluster nodes: %q (code %d, %v)", out, code, err)
	}
	// A node joins through this server with a token (and the CA pinned);
	// the token does not work twice, and a wrong pin is refused.
	tok, hint, code, err := runCLI("cluster", "token", "--store", dsn, "--data-dir", dataDir)
	_, pin, _ := strings.Cut(hint, "--ca-sha256 ")
	pin, _, _ = strings.Cut(pin, " ")
	if err != nil || code != 0 || !strings.HasPrefix(tok, "moatjoin_") || len(pin) != 64 {
		t.Fatalf("moat cluster token: %q %q (code %d, %v)", tok, hint, code, err)
	}
	dir := t.TempDir()
	joinArgs := []string{"cluster", "join", "--api", s.base, "--token", strings.TrimSpace(tok), "--node-id", "node-b", "--dir", dir}
	if out, _, code, err := runCLI(append(joinArgs, "--ca-sha256", pin)...); err != nil || code != 0 || !strings.Contains(out, "joined as node-b") {
		t.Fatalf("moat cluster join: %q (code %d, %v)", out, code, err)
	}
	for _, f := range []string{"node.key", "node.crt", "ca.crt"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("after the join: %v", err)
		}
	}
	if _, _, _, err := runCLI(joinArgs...); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("a second join with the token: %v", err)
	}
	tok2, _, _, _ := runCLI("cluster", "token", "--store", dsn, "--data-dir", dataDir)
	joinArgs[5] = strings.TrimSpace(tok2)
	if _, _, _, err := runCLI(append(joinArgs, "--ca-sha256", strings.Repeat("0", 64))...); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("a join with the wrong CA pin: %v", err)
	}

	s.stop()
	s2 := startServerArgs(t, dataDir, []string{"--store", dsn, "--node-id", "node-a"})
	s2.key = s.key // printed once, when the database had none
	got, err := s2.client().GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatalf("after restart: get %s: %v\n%s", sb.ID, err, s2.out.String())
	}
	if out := runIn(t, got, "echo again"); !strings.Contains(out, "again") {
		t.Fatalf("after restart: run: %q", out)
	}
	if err := got.Kill(ctx); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkStoreCreateFirstCommand measures create→first command of a
// container sandbox through a real server on SQLite (the baseline) and on
// PostgreSQL (a private server, fsync off as SQLite's synchronous=NORMAL
// skips it per commit), MOAT_BENCH_STORE_ROUNDS (default 10) rounds each,
// one at a time, in two alternating blocks per store, and prints the
// medians and their ratio.
func BenchmarkStoreCreateFirstCommand(b *testing.B) {
	rootfs := requireRealServer(b)
	rounds := envIntOr("MOAT_BENCH_STORE_ROUNDS", 10)
	pg := pgtest.Start(b)
	dsn := pg.NewDB(b)
	ctx := context.Background()
	db, err := store.Open(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	if err := db.UpsertTemplate(ctx, store.Template{Name: "base", RootfsDir: rootfs}); err != nil {
		b.Fatal(err)
	}
	db.Close()
	sqliteDir, pgDir := newDataDir(b, rootfs), newDataDir(b, rootfs)
	times := map[string][]time.Duration{}
	keys := map[string]string{} // printed once, by a store's first server
	for b.Loop() {
		for range 2 {
			for _, name := range []string{"sqlite", "postgres"} {
				var s *realServer
				if name == "sqlite" {
					s = startServer(b, sqliteDir)
				} else {
					s = startServerArgs(b, pgDir, []string{"--store", dsn})
				}
				if s.key == "" {
					s.key = keys[name]
				}
				keys[name] = s.key
				for range (rounds + 1) / 2 {
					times[name] = append(times[name], createFirstCommand(b, s))
				}
				s.stop()
			}
		}
	}
	med := func(v []time.Duration) time.Duration { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
	base, p := med(times["sqlite"]), med(times["postgres"])
	fmt.Printf("\ncreate→first command by store (container runtime, %d rounds each, medians)\n", len(times["sqlite"]))
	fmt.Printf("  %-22s %8v\n", "SQLite (baseline)", base.Round(100*time.Microsecond))
	fmt.Printf("  %-22s %8v   ratio %.2f×\n", "PostgreSQL", p.Round(100*time.Microsecond), float64(p)/float64(base))
	b.ReportMetric(float64(p)/float64(base), "ratio")
}

// createFirstCommand creates a sandbox from "base", runs `true` in it and
// returns the time from the create request to the command's end; the kill
// is not timed.
func createFirstCommand(b testing.TB, s *realServer) time.Duration {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	sb, err := s.client().CreateSandbox(ctx, moat.CreateOptions{Template: "base", Timeout: 5 * time.Minute})
	if err != nil {
		b.Fatalf("create: %v", err)
	}
	defer sb.Kill(context.Background())
	if code, err := sb.Run(ctx, "true", moat.RunOptions{}); err != nil || code != 0 {
		b.Fatalf("run: %d %v", code, err)
	}
	return time.Since(start)
}

// TestServePostgresOutage stops PostgreSQL under a running server for a
// while: the running sandbox keeps answering commands through the proxy,
// creates and API reads answer 503 with a JSON body that names the
// database, promptly; when PostgreSQL is back, creates work again without
// restarting the server.
func TestServePostgresOutage(t *testing.T) {
	pg, dsn := pgWithBase(t)
	ctx := context.Background()
	dataDir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dataDir), 0o711); err != nil {
		t.Fatal(err)
	}
	s := startServerArgs(t, dataDir, []string{"--store", dsn})
	sb := s.createSandbox(t)
	runIn(t, sb, "echo before")

	pg.Stop()
	c := loadClient()
	for i := range 3 {
		r := postCreate(ctx, c, s)
		if r.status != http.StatusServiceUnavailable || r.err != nil {
			t.Fatalf("create %d during the outage: %d %v, want 503 with an error body\n%s", i, r.status, r.err, s.out.String())
		}
		if r.took > 10*time.Second {
			t.Errorf("create %d during the outage took %v", i, r.took)
		}
	}
	_, err := s.client().ListSandboxes(ctx)
	t.Logf("list during the outage: %v", err)
	if err == nil || !strings.Contains(err.Error(), "PostgreSQL") {
		t.Errorf("list during the outage: %v, want an error naming PostgreSQL", err)
	}
	if got := runIn(t, sb, "echo during"); !strings.Contains(got, "during") {
		t.Errorf("command during the outage: %q", got)
	}

	pg.Restart(t)
	r := postCreate(ctx, c, s)
	if r.status != http.StatusCreated {
		t.Fatalf("create after the outage: %d %v\n%s", r.status, r.err, s.out.String())
	}
	killAll(t, c, s, []string{r.id})
	runIn(t, sb, "echo after")
}
