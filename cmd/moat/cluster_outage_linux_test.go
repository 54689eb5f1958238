package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/testkit/pgtest"
	moat "github.com/moatsh/moat/sdk/go"
)

// TestClusterOutages: two API servers in front of two nodes on one
// PostgreSQL. kill -9 of one API server during 50 creates: every create
// succeeded or failed with an error, the other API server answered
// throughout, and afterwards the sandboxes listed are exactly those the
// nodes run (none lost, none leaked). PostgreSQL stopped (10 s; 30 s
// with MOAT_TEST_FULL): sandboxes on both nodes keep running commands
// through the API server, creates get 503, and everything works again
// once it is back, without a restart.
func TestClusterOutages(t *testing.T) {
	pg, dsn := pgWithBase(t)
	ctx := context.Background()
	dirA, dirB := clusterDir(t), clusterDir(t)
	a := startServerArgs(t, dirA, []string{"--store", dsn, "--node-id", "node-a", "--node-addr", "127.0.0.1:0"})
	b := startScoped(t, dirB, []string{"--store", dsn, "--node-id", "node-b", "--node-addr", "127.0.0.1:0", "--scope", "5"})
	var fronts []*realServer
	for i, scope := range []string{"6", "7"} {
		dir := clusterDir(t)
		copyDir(t, filepath.Join(dirA, "cluster-ca"), filepath.Join(dir, "cluster-ca"))
		fronts = append(fronts, startScoped(t, dir, []string{"--store", dsn, "--node-id", fmt.Sprintf("front%d", i+1), "--role", "api", "--scope", scope}))
	}
	for _, s := range append([]*realServer{b}, fronts...) {
		s.key = a.key
	}
	t.Cleanup(func() {
		list, _ := a.client().ListSandboxes(ctx)
		for _, sb := range list {
			_ = a.client().Kill(ctx, sb.ID)
		}
	})
	killAPIServerDuringCreates(t, fronts[0], fronts[1], dirA, dirB)
	storeOutage(t, pg, fronts[1])
}

func killAPIServerDuringCreates(t *testing.T, victim, other *realServer, dirA, dirB string) {
	ctx := context.Background()
	var done, failed atomic.Int32
	var wg sync.WaitGroup
	jobs := make(chan int, 50)
	for i := range 50 {
		jobs <- i
	}
	close(jobs)
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				_, err := victim.client().CreateSandbox(cctx, moat.CreateOptions{Template: "base", Timeout: 10 * time.Minute})
				cancel()
				if err != nil {
					failed.Add(1)
				} else {
					done.Add(1)
				}
			}
		}()
	}
	// The other API server answers throughout.
	stop := make(chan struct{})
	var listErrs atomic.Int32
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := other.client().ListSandboxes(ctx); err != nil {
				listErrs.Add(1)
				t.Logf("the other API server: %v", err)
			}
		}
	}()
	for done.Load() < 10 {
		time.Sleep(20 * time.Millisecond)
	}
	_ = victim.cmd.Process.Kill()
	wg.Wait()
	close(stop)
	t.Logf("50 creates, API server killed after 10: %d succeeded, %d failed", done.Load(), failed.Load())
	if done.Load()+failed.Load() != 50 || failed.Load() == 0 {
		t.Errorf("creates: %d succeeded and %d failed, want 50 answered and some cut by the kill", done.Load(), failed.Load())
	}
	if listErrs.Load() > 0 {
		t.Errorf("the other API server failed %d lists meanwhile", listErrs.Load())
	}
	// None lost, none leaked: what is listed is what the nodes run.
	var listed, running []string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		list, err := other.client().ListSandboxes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		listed = listed[:0]
		for _, sb := range list {
			listed = append(listed, sb.ID)
		}
		running = runningSandboxes(t, dirA, dirB)
		slices.Sort(listed)
		if slices.Equal(listed, running) || time.Now().After(deadline) {
			break
		}
	}
	if !slices.Equal(listed, running) {
		t.Errorf("after the kill, listed %v but the nodes run %v", listed, running)
	}
	if len(listed) < int(done.Load()) {
		t.Errorf("%d sandboxes listed, fewer than the %d creates that succeeded", len(listed), done.Load())
	}
}

// runningSandboxes are the IDs of the started containers (a container
// slot, made ahead for the next create, is created but not started) whose
// bundles are in dirs, sorted.
func runningSandboxes(t *testing.T, dirs ...string) []string {
	t.Helper()
	var out []string
	for _, root := range []string{"/run/moat/crun", "/run/moat/runc", "/run/moat/s5/container"} {
		b, err := exec.Command("crun", "--root", root, "list").Output()
		if err != nil {
			continue // no such root
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 4 || f[2] != "running" {
				continue
			}
			for _, d := range dirs {
				if rest, ok := strings.CutPrefix(f[3], filepath.Join(d, "sandboxes")+"/"); ok {
					id, _, _ := strings.Cut(rest, "/")
					out = append(out, id)
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func storeOutage(t *testing.T, pg *pgtest.Server, f *realServer) {
	ctx := context.Background()
	outage := 10 * time.Second
	if os.Getenv("MOAT_TEST_FULL") != "" {
		outage = 30 * time.Second
	}
	list, err := f.client().ListSandboxes(ctx)
	if err != nil || len(list) == 0 {
		t.Fatalf("before the outage: %d sandboxes, %v", len(list), err)
	}
	var sbs []*moat.Sandbox
	for _, info := range list {
		sb, err := f.client().GetSandbox(ctx, info.ID)
		if err != nil {
			t.Fatal(err)
		}
		runIn(t, sb, "true") // the front door knows its route
		sbs = append(sbs, sb)
	}
	pg.Stop()
	start := time.Now()
	for time.Since(start) < outage {
		for _, sb := range sbs {
			if out := runIn(t, sb, "echo during-outage"); !strings.Contains(out, "during-outage") {
				t.Fatalf("during the outage, run in %s: %q", sb.ID, out)
			}
		}
		_, err := f.client().CreateSandbox(ctx, moat.CreateOptions{Template: "base", Timeout: time.Minute})
		if !errors.Is(err, moat.ErrUnavailable) {
			t.Fatalf("a create during the outage: %v, want 503", err)
		}
		time.Sleep(time.Second)
	}
	t.Logf("PostgreSQL stopped %v: %d sandboxes ran commands throughout, creates got 503", outage, len(sbs))
	pg.Restart(t)
	var sb *moat.Sandbox
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
		if sb, err = f.client().CreateSandbox(ctx, moat.CreateOptions{Template: "base", Timeout: time.Minute}); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("a create after the outage: %v", err)
	}
	if out := runIn(t, sb, "echo after"); !strings.Contains(out, "after") {
		t.Fatalf("after the outage: %q", out)
	}
	for _, s := range sbs {
		if _, err := f.client().GetSandbox(ctx, s.ID); err != nil {
			t.Errorf("after the outage, get %s: %v", s.ID, err)
		}
	}
}
