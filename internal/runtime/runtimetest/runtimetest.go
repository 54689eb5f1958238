// Package runtimetest is the conformance suite every runtime.Runtime
// passes: the fake the orchestrator tests use and each real backend
// (container, gvisor, vm). Run executes the cases against a Harness; each
// case checks that the sandboxes it made left nothing on the host.
package runtimetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/runtime"
)

// Harness is one backend under test.
type Harness struct {
	Runtime runtime.Runtime
	// Spec returns the spec of a new sandbox with the given ID (root
	// filesystem, small limits).
	Spec func(id string) runtime.Spec
	// Leaks lists host objects still named after id (processes, mounts,
	// netns, veths, cgroups, directories); nil skips the check.
	Leaks func(id string) []string
	// Ready checks that a sandbox answers (envd); nil skips the check.
	Ready func(ctx context.Context, h *runtime.Handle) error
	// Envd: sandboxes run the real envd, whose /files API the cases use
	// to leave a file in a sandbox and read it back.
	Envd bool
}

// NewID returns a fresh sandbox ID.
func NewID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "c" + hex.EncodeToString(b)
}

// Run runs every case; newHarness is called once per case.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	cases := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"CreateKill", testCreateKill},
		{"KillUnknown", testKillUnknown},
		{"StatsRunning", testStatsRunning},
		{"WaitSeesDeath", testWaitSeesDeath},
		{"PauseTwiceResume", testPauseTwice},
		{"ResumeUnknown", testResumeUnknown},
		{"ResumeRunning", testResumeRunning},
		{"RecoverAdoptsLiveRemovesDead", testRecover},
		{"SnapshotUnsupported", testSnapshotUnsupported},
		{"PauseFilesystem", testPauseFilesystem}, // fspause.go
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newHarness(t)) })
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// create makes a sandbox, killed and leak-checked when the test ends.
func create(t *testing.T, h Harness) *runtime.Handle {
	t.Helper()
	id := NewID()
	hd, err := h.Runtime.Create(ctxT(t), h.Spec(id))
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
	t.Cleanup(func() {
		if err := h.Runtime.Kill(context.Background(), id); err != nil {
			t.Errorf("kill %s: %v", id, err)
		}
		noLeaks(t, h, id)
	})
	if hd.ID != id || hd.Runtime != h.Runtime.Name() {
		t.Errorf("handle %+v: want ID %s, Runtime %s", hd, id, h.Runtime.Name())
	}
	ready(t, h, hd)
	return hd
}

func ready(t *testing.T, h Harness, hd *runtime.Handle) {
	t.Helper()
	if h.Ready == nil {
		return
	}
	if err := h.Ready(ctxT(t), hd); err != nil {
		t.Fatalf("sandbox %s not ready: %v", hd.ID, err)
	}
}

// noLeaks waits briefly for the host objects of id to go.
func noLeaks(t *testing.T, h Harness, id string) {
	t.Helper()
	if h.Leaks == nil {
		return
	}
	var left []string
	for i := 0; i < 50; i++ {
		if left = h.Leaks(id); len(left) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("sandbox %s left %q", id, left)
}

func testCreateKill(t *testing.T, h Harness) {
	hd := create(t, h)
	ctx := ctxT(t)
	if err := h.Runtime.Kill(ctx, hd.ID); err != nil {
		t.Fatalf("kill: %v", err)
	}
	if running(hd.ID, h) {
		t.Error("still running after kill")
	}
	noLeaks(t, h, hd.ID)
	if err := h.Runtime.Kill(ctx, hd.ID); err != nil {
		t.Errorf("second kill: %v", err)
	}
}

func testKillUnknown(t *testing.T, h Harness) {
	id := NewID()
	if err := h.Runtime.Kill(ctxT(t), id); err != nil {
		t.Errorf("kill of an unknown sandbox: %v", err)
	}
	if _, err := h.Runtime.Wait(ctxT(t), id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("wait for an unknown sandbox: %v, want not found", err)
	}
	noLeaks(t, h, id)
}

func testStatsRunning(t *testing.T, h Harness) {
	hd := create(t, h)
	ctx := ctxT(t)
	if !running(hd.ID, h) {
		t.Fatal("not running after create")
	}
	st, err := h.Runtime.Stats(ctx, hd.ID)
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	if st.MemoryBytes == 0 || st.Time.IsZero() {
		t.Errorf("stats %+v: want memory in use and a time", st)
	}
}

// testPauseTwice: a second pause of a paused sandbox may fail, but it
// neither breaks the sandbox nor makes a single resume insufficient.
func testPauseTwice(t *testing.T, h Harness) {
	hd := create(t, h)
	ctx := ctxT(t)
	if err := h.Runtime.Pause(ctx, hd.ID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if err := h.Runtime.Pause(ctx, hd.ID); err != nil {
		t.Logf("second pause (allowed to fail): %v", err)
	}
	nh, err := h.Runtime.Resume(ctx, hd.ID)
	if err != nil || nh == nil {
		t.Fatalf("resume: %v (handle %v)", err, nh)
	}
	if nh.Paused || !running(hd.ID, h) {
		t.Fatalf("after resume: handle %+v, running %v", nh, running(hd.ID, h))
	}
	ready(t, h, nh)
}

// testWaitSeesDeath: a Wait under way returns soon after the sandbox's
// process dies behind the runtime's back (SIGKILL of Handle.PID; a
// runtime's own Kill when the handle has no PID), and later Waits return
// at once.
func testWaitSeesDeath(t *testing.T, h Harness) {
	hd := create(t, h)
	ctx := ctxT(t)
	type result struct {
		st  runtime.ExitStatus
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		st, err := h.Runtime.Wait(ctx, hd.ID)
		done <- result{st, err, time.Now()}
	}()
	select {
	case r := <-done:
		t.Fatalf("wait returned while the sandbox runs: %v, %v", r.st, r.err)
	case <-time.After(100 * time.Millisecond):
	}
	killed := time.Now()
	if hd.PID > 0 {
		if err := syscall.Kill(hd.PID, syscall.SIGKILL); err != nil {
			t.Fatalf("kill process %d: %v", hd.PID, err)
		}
	} else if err := h.Runtime.Kill(ctx, hd.ID); err != nil {
		t.Fatalf("kill: %v", err)
	}
	select {
	case r := <-done:
		t.Logf("wait returned %v after the death (%s, err %v)", r.at.Sub(killed), r.st, r.err)
		if r.err != nil && !errors.Is(r.err, errdefs.ErrNotFound) {
			t.Errorf("wait: %v", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("wait still blocked 10 s after the sandbox died")
	}
	if running(hd.ID, h) {
		t.Error("a second wait blocks on a dead sandbox")
	}
}

// running reports whether id's process runs: a Wait is still blocked
// after a moment.
func running(id string, h Harness) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := h.Runtime.Wait(ctx, id)
	return errors.Is(err, context.DeadlineExceeded)
}

func testResumeUnknown(t *testing.T, h Harness) {
	nh, err := h.Runtime.Resume(ctxT(t), NewID())
	if err == nil || nh != nil {
		t.Errorf("resume of an unknown sandbox: handle %v, err %v; want an error and no handle", nh, err)
	}
}

// testResumeRunning: resuming a running sandbox either fails without
// touching it or succeeds as a no-op; it runs afterwards either way.
func testResumeRunning(t *testing.T, h Harness) {
	hd := create(t, h)
	ctx := ctxT(t)
	if nh, err := h.Runtime.Resume(ctx, hd.ID); err != nil {
		t.Logf("resume of a running sandbox (allowed to fail): %v", err)
	} else if nh == nil {
		t.Error("resume succeeded without a handle")
	}
	if !running(hd.ID, h) {
		t.Fatal("not running after resuming a running sandbox")
	}
	ready(t, h, hd)
}

func testRecover(t *testing.T, h Harness) {
	live, dead := create(t, h), create(t, h)
	ctx := ctxT(t)
	hs, err := h.Runtime.Recover(ctx, []string{live.ID})
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	var adopted bool
	for _, x := range hs {
		switch x.ID {
		case live.ID:
			adopted = true
			if x.Runtime != h.Runtime.Name() || x.Paused {
				t.Errorf("adopted handle %+v", x)
			}
		case dead.ID:
			t.Errorf("recover adopted %s, which is not live", dead.ID)
		}
	}
	if !adopted {
		t.Errorf("recover did not adopt live sandbox %s (got %d handles)", live.ID, len(hs))
	}
	if !running(live.ID, h) {
		t.Error("live sandbox not running after recover")
	}
	if running(dead.ID, h) {
		t.Error("sandbox not in live still running after recover")
	}
	noLeaks(t, h, dead.ID)
}

func testSnapshotUnsupported(t *testing.T, h Harness) {
	if _, ok := h.Runtime.(runtime.Snapshotter); ok {
		t.Skipf("by design: %s takes snapshots (runtime.Snapshotter); the case is for runtimes without", h.Runtime.Name())
	}
	id := NewID()
	spec := h.Spec(id)
	spec.Snapshot = "snap" + id
	hd, err := h.Runtime.Create(ctxT(t), spec)
	if err == nil {
		_ = h.Runtime.Kill(context.Background(), id)
		t.Fatalf("create from a snapshot on %s succeeded: %+v", h.Runtime.Name(), hd)
	}
	if !errors.Is(err, errdefs.ErrNotImplemented) {
		t.Errorf("create from a snapshot: %v; want ErrNotImplemented", err)
	}
	noLeaks(t, h, id)
}
