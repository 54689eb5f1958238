package main

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/store/pgsql"
	"github.com/moatsh/moat/internal/testkit/hostleak"
	moat "github.com/moatsh/moat/sdk/go"
)

// TestCluster runs three real servers on one PostgreSQL: node-a (api and
// node, host scope) holds the cluster CA; node-b (a node, server scope 5)
// joins with a token; front (an API server alone, scope 6) holds no
// sandbox. Creates through any of them are placed on both nodes; every
// sandbox answers commands, gets, lists and kills through every server;
// a stopped node's sandboxes answer 503 (not "unknown") until it is
// back, and then run commands again; an unknown ID is 404 everywhere.
func TestCluster(t *testing.T) {
	_, dsn := pgWithBase(t)
	ctx := context.Background()
	dirA, dirB, dirF := clusterDir(t), clusterDir(t), clusterDir(t)
	a := startServerArgs(t, dirA, []string{"--store", dsn, "--node-id", "node-a", "--node-addr", "127.0.0.1:0"})
	if a.key == "" {
		t.Fatalf("no API key printed:\n%s", a.out.String())
	}
	tok, hint, code, err := runCLI("cluster", "token", "--store", dsn, "--data-dir", dirA)
	_, pin, _ := strings.Cut(hint, "--ca-sha256 ")
	pin, _, _ = strings.Cut(pin, " ")
	if err != nil || code != 0 {
		t.Fatalf("moat cluster token: %v", err)
	}
	if out, _, code, err := runCLI("cluster", "join", "--api", a.base, "--token", strings.TrimSpace(tok), "--ca-sha256", pin,
		"--node-id", "node-b", "--dir", filepath.Join(dirB, "cluster-node")); err != nil || code != 0 {
		t.Fatalf("moat cluster join: %q %v", out, err)
	}
	bArgs := []string{"--store", dsn, "--node-id", "node-b", "--node-addr", "127.0.0.1:0", "--scope", "5"}
	b := startScoped(t, dirB, bArgs)
	// The API server signs its own certificate with the CA it shares with
	// node-a (copied, as an API server's is).
	copyDir(t, filepath.Join(dirA, "cluster-ca"), filepath.Join(dirF, "cluster-ca"))
	f := startScoped(t, dirF, []string{"--store", dsn, "--node-id", "front", "--role", "api", "--node-addr", "127.0.0.1:0", "--scope", "6"})
	servers := map[string]*realServer{"node-a": a, "node-b": b, "front": f}
	for _, s := range servers {
		s.key = a.key
	}
	// Before the servers stop: kill what is left through node-a (a
	// sandbox's own cleanup goes through the server that made it, which
	// may have restarted elsewhere).
	t.Cleanup(func() {
		list, _ := a.client().ListSandboxes(ctx)
		for _, sb := range list {
			_ = a.client().Kill(ctx, sb.ID)
		}
	})

	// Creates through each server land on both nodes, never on the API server.
	var sbs []*moat.Sandbox
	nodes := map[string]int{}
	for i := range 6 {
		s := []*realServer{a, b, f}[i%3]
		sb := s.createSandbox(t)
		sbs = append(sbs, sb)
		nodes[nodeOf(t, dsn, sb.ID)]++
	}
	t.Logf("sandboxes per node: %v", nodes)
	if nodes["node-a"] == 0 || nodes["node-b"] == 0 || nodes["front"] != 0 {
		t.Fatalf("placement: sandboxes per node %v, want both nodes used and none on the API server", nodes)
	}
	// Every sandbox through every server: a command, a get, the list.
	for name, s := range servers {
		c := s.client()
		list, err := c.ListSandboxes(ctx)
		if err != nil || len(list) != len(sbs) {
			t.Fatalf("%s: list: %d sandboxes, %v; want %d", name, len(list), err, len(sbs))
		}
		for _, sb := range sbs {
			got, err := c.GetSandbox(ctx, sb.ID)
			if err != nil {
				t.Fatalf("%s: get %s (on %s): %v", name, sb.ID, nodeOf(t, dsn, sb.ID), err)
			}
			if out := runIn(t, got, "echo via-"+name); !strings.Contains(out, "via-"+name) {
				t.Fatalf("%s: run in %s: %q", name, sb.ID, out)
			}
		}
		if _, err := c.GetSandbox(ctx, "nosuchsandbox0"); !errors.Is(err, moat.ErrNotFound) {
			t.Errorf("%s: get of an unknown sandbox: %v, want not found", name, err)
		}
	}
	templatesAcrossNodes(t, dsn, servers, dirA, dirB)
	// The node API answers only the cluster's members: a client without a
	// certificate of the cluster CA gets no TLS session.
	var nodeAddr string
	if err := pgConn(t, dsn).QueryRowContext(ctx, `SELECT addr FROM nodes WHERE id = 'node-a'`).Scan(&nodeAddr); err != nil || nodeAddr == "" {
		t.Fatalf("node-a's node API address: %q %v", nodeAddr, err)
	}
	stranger := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if resp, err := stranger.Get("https://" + nodeAddr + "/sandboxes"); err == nil {
		resp.Body.Close()
		t.Errorf("node API without a client certificate: %d, want the handshake refused", resp.StatusCode)
	}
	// A kill through the API server ends a sandbox on either node.
	for _, sb := range sbs[:2] {
		if err := f.client().Kill(ctx, sb.ID); err != nil {
			t.Fatalf("kill %s through the API server: %v", sb.ID, err)
		}
		if _, err := a.client().GetSandbox(ctx, sb.ID); !errors.Is(err, moat.ErrNotFound) {
			t.Errorf("after the kill, get %s: %v, want not found", sb.ID, err)
		}
	}
	sbs = sbs[2:]
	// A node that stops: its sandboxes answer 503 through the others (the
	// node may come back), and run commands again once it is back.
	var onB *moat.Sandbox
	for _, sb := range sbs {
		if nodeOf(t, dsn, sb.ID) == "node-b" {
			onB = sb
		}
	}
	if onB == nil {
		t.Fatal("no sandbox left on node-b")
	}
	b.stop()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.base+"/sandboxes/"+onB.ID, nil)
	req.Header.Set("X-API-KEY", a.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("get of a stopped node's sandbox: %d, want 503", resp.StatusCode)
	}
	b = startScoped(t, dirB, bArgs)
	b.key = a.key
	got, err := f.client().GetSandbox(ctx, onB.ID)
	for deadline := time.Now().Add(5 * time.Second); errors.Is(err, moat.ErrUnavailable) && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond) // the front door learns node-b's new address
		got, err = f.client().GetSandbox(ctx, onB.ID)
	}
	if err != nil {
		t.Fatalf("after node-b's restart: get %s: %v", onB.ID, err)
	}
	if out := runIn(t, got, "echo back"); !strings.Contains(out, "back") {
		t.Fatalf("after node-b's restart: run: %q", out)
	}
	lostNode(t, dsn, servers, b, dirB, bArgs)
}

// lostNode kills node-b with SIGKILL while it runs 10 sandboxes: within 15 s (the lease and a
// watcher's round) its sandboxes are gone through the other servers (get
// is not found, list leaves them out), new creates land on node-a, and
// once node-b is back nothing of those sandboxes is left on its host.
func lostNode(t *testing.T, dsn string, servers map[string]*realServer, b *realServer, dirB string, bArgs []string) {
	ctx := context.Background()
	a, f := servers["node-a"], servers["front"]
	var onB []string
	for range 40 { // until node-b holds 10 sandboxes
		list, err := a.client().ListSandboxes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		onB = onB[:0]
		for _, sb := range list {
			if nodeOf(t, dsn, sb.ID) == "node-b" {
				onB = append(onB, sb.ID)
			}
		}
		if len(onB) >= 10 {
			break
		}
		f.createSandbox(t)
	}
	if len(onB) < 10 {
		t.Fatalf("%d sandboxes on node-b, want 10", len(onB))
	}
	_ = b.cmd.Process.Kill()
	<-b.done
	killed := time.Now()
	for _, id := range onB {
		for {
			_, err := f.client().GetSandbox(ctx, id)
			if errors.Is(err, moat.ErrNotFound) {
				break
			}
			if time.Since(killed) > 30*time.Second {
				t.Fatalf("sandbox %s of the killed node-b: %v after 30 s, want not found", id, err)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	gone := time.Since(killed)
	t.Logf("node-b's %d sandboxes reported gone %v after its kill -9", len(onB), gone.Round(100*time.Millisecond))
	if gone > 18*time.Second {
		t.Errorf("node-b's sandboxes were reported gone after %v, want within 15 s (lease 12 s + a watcher round)", gone)
	}
	// The list too: the watcher marks the node lost, then removes its
	// rows, so a get may say gone a moment before the list does.
	for {
		list, err := a.client().ListSandboxes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		left := slices.ContainsFunc(list, func(sb moat.SandboxInfo) bool { return slices.Contains(onB, sb.ID) })
		if !left {
			break
		}
		if time.Since(killed) > 20*time.Second {
			t.Fatalf("20 s after the kill, the list still has sandboxes of the lost node: %v", list)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for range 2 {
		if sb := f.createSandbox(t); nodeOf(t, dsn, sb.ID) != "node-a" {
			t.Errorf("a create after node-b's loss went to %s", nodeOf(t, dsn, sb.ID))
		}
	}
	startScoped(t, dirB, bArgs)
	if left := hostleak.Of(dirB, onB...); len(left) > 0 {
		t.Errorf("after node-b's restart, its sandboxes left: %v", left)
	}
}

// clusterDir is a data dir (traversable for the sandboxes' roots).
func clusterDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		t.Fatal(err)
	}
	return dir
}

// copyDir copies the files of dir from to a new dir to, with their modes.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(to, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		fi, ierr := e.Info()
		if err != nil || ierr != nil {
			t.Fatal(errors.Join(err, ierr))
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
}

// startScoped starts a server in its own server scope (--scope in args)
// beside the host-scope one of this package's tests.
func startScoped(t *testing.T, dataDir string, args []string) *realServer {
	t.Helper()
	s, err := tryStart(t, dataDir, args)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// pgConns keeps one pool per database for the tests' own queries (a pool
// per query would exhaust the server's connections).
var pgConns sync.Map

func pgConn(t *testing.T, dsn string) *sql.DB {
	if db, ok := pgConns.Load(dsn); ok {
		return db.(*sql.DB)
	}
	db, err := pgsql.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(2)
	pgConns.Store(dsn, db)
	return db
}

// nodeOf is the node that sandbox id's row names.
func nodeOf(t *testing.T, dsn, id string) string {
	t.Helper()
	var node string
	if err := pgConn(t, dsn).QueryRowContext(context.Background(), `SELECT node_id FROM sandboxes WHERE id = $1`, id).Scan(&node); err != nil {
		t.Fatalf("node of %s: %v", id, err)
	}
	return node
}

// templatesAcrossNodes builds a template through the API server (which
// holds no sandbox) and starts sandboxes of it on both nodes: each copies
// the tree from the API server once and checks its digest; a tree
// changed on the builder's disk after the build is refused everywhere.
func templatesAcrossNodes(t *testing.T, dsn string, servers map[string]*realServer, dirA, dirB string) {
	ctx := context.Background()
	f := servers["front"]
	dir := t.TempDir()
	df := filepath.Join(dir, "Dockerfile")
	if err := os.WriteFile(df, []byte("FROM base\nRUN echo built-on-front > /built.txt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if out, errOut, code, err := runCLI("template", "build", "--dockerfile", df, "--name", "clustered",
		"--api-url", f.base, "--api-key", f.key); err != nil || code != 0 {
		t.Fatalf("template build through the API server: %v (code %d)\n%s\n%s\n%s", err, code, out, errOut, f.out.String())
	}
	t.Logf("template built through the API server in %v", time.Since(start).Round(100*time.Millisecond))
	var node, digest, rootfs string
	if err := pgConn(t, dsn).QueryRowContext(ctx, `SELECT node_id, digest, rootfs_dir FROM templates WHERE name = 'clustered'`).
		Scan(&node, &digest, &rootfs); err != nil || node != "front" || len(digest) != 64 {
		t.Fatalf("template row: node %q digest %q: %v", node, digest, err)
	}
	// Changed on the builder's disk: no node uses it.
	built := filepath.Join(rootfs, "built.txt")
	fi, err := os.Stat(built)
	if err != nil {
		t.Fatal(err)
	}
	orig, _ := os.ReadFile(built)
	if err := os.WriteFile(built, []byte("tampered\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = f.client().CreateSandbox(ctx, moat.CreateOptions{Template: "clustered", Timeout: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "digest") {
		t.Fatalf("create from a tampered template: %v, want a refusal naming the digest", err)
	}
	if err := os.WriteFile(built, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(built, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	nodes := map[string]bool{}
	start = time.Now()
	for range 4 {
		sb, err := f.client().CreateSandbox(ctx, moat.CreateOptions{Template: "clustered", Timeout: 5 * time.Minute})
		if err != nil {
			t.Fatalf("create from the template built on the API server: %v", err)
		}
		t.Cleanup(func() { _ = f.client().Kill(context.Background(), sb.ID) })
		nodes[nodeOf(t, dsn, sb.ID)] = true
		if out := runIn(t, sb, "cat /built.txt"); !strings.Contains(out, "built-on-front") {
			t.Fatalf("the template's file in %s: %q", sb.ID, out)
		}
	}
	t.Logf("4 sandboxes of it on %d nodes, each node copying the tree once, in %v", len(nodes), time.Since(start).Round(100*time.Millisecond))
	if !nodes["node-a"] || !nodes["node-b"] {
		t.Errorf("sandboxes of the template ran on %v, want both nodes", nodes)
	}
	for _, d := range []string{dirA, dirB} {
		if m, _ := filepath.Glob(filepath.Join(d, "cluster-templates", "*-"+digest[:16], "rootfs", "built.txt")); len(m) != 1 {
			t.Errorf("no checked copy of the template in %s", d)
		}
	}
}
