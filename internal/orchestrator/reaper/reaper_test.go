package reaper_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/orchestrator/orchestratortest"
	"github.com/moatsh/moat/internal/orchestrator/reaper"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/testkit"
)

// recorder collects the hooks' calls; a process "exits" when its channel
// is closed.
type recorder struct {
	mu      sync.Mutex
	expired []string
	died    []string
	exits   map[string]chan struct{}
}

func (r *recorder) hooks() reaper.Hooks {
	return reaper.Hooks{
		Wait: func(ctx context.Context, id string) (runtime.ExitStatus, error) {
			r.mu.Lock()
			ch := r.exits[id]
			r.mu.Unlock()
			select {
			case <-ch:
				return runtime.ExitStatus{Code: 1}, nil
			case <-ctx.Done():
				return runtime.ExitStatus{}, ctx.Err()
			}
		},
		Expire: func(ctx context.Context, id string) { r.mu.Lock(); r.expired = append(r.expired, id); r.mu.Unlock() },
		Died: func(ctx context.Context, id string, gen uint64, st runtime.ExitStatus, err error) {
			r.mu.Lock()
			r.died = append(r.died, id)
			r.mu.Unlock()
		},
	}
}

func (r *recorder) calls() (expired, died []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.expired...), append([]string(nil), r.died...)
}

// The waits below are on the wall clock: the fake clock only decides when
// timers fire, the hooks still run in the reaper's goroutines.
const wait = 5 * time.Second

func TestReaper(t *testing.T) {
	clk := orchestratortest.NewClock()
	rec := &recorder{exits: map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{}), "c": make(chan struct{})}}
	r := reaper.New(clk, rec.hooks())

	// Before Start nothing is armed.
	r.Track("a", 0, clk.Now().Add(time.Minute))
	if n := clk.Pending(); n != 0 {
		t.Fatalf("%d timers before Start", n)
	}
	if !r.Start() || r.Start() {
		t.Fatal("Start: want true once, then false")
	}

	// A timer fires at the end; an untracked one never does.
	r.Track("a", 0, clk.Now().Add(time.Minute))
	r.Track("b", 0, clk.Now().Add(time.Minute))
	r.Untrack("b")
	clk.Advance(time.Minute)
	testkit.WaitFor(t, wait, "a to expire", func() bool { e, _ := rec.calls(); return len(e) == 1 })
	if e, _ := rec.calls(); e[0] != "a" {
		t.Fatalf("expired %v, want [a]", e)
	}
	// Rearm fires again later.
	r.Rearm("a", time.Second)
	clk.Advance(time.Second)
	testkit.WaitFor(t, wait, "a to expire again", func() bool { e, _ := rec.calls(); return len(e) == 2 })

	// A process ending on its own is reported; an untracked one is not.
	close(rec.exits["a"])
	testkit.WaitFor(t, wait, "a to die", func() bool { _, d := rec.calls(); return len(d) == 1 })
	close(rec.exits["b"])

	// Stop waits for the watches and leaves nothing armed.
	r.Track("c", 0, clk.Now().Add(time.Hour))
	r.Stop()
	if n := clk.Pending(); n != 0 {
		t.Fatalf("%d timers after Stop", n)
	}
	if _, d := rec.calls(); len(d) != 1 || d[0] != "a" {
		t.Fatalf("died %v, want [a]", d)
	}
	if r.Start() {
		t.Fatal("Start after Stop succeeded")
	}
}
