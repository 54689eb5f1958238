package orchestrator_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/orchestrator/orchestratortest"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/testkit"
)

// reaperWait bounds the waits below on the wall clock: the reaper acts in
// goroutines of its own even when the clock is fake.
const reaperWait = 5 * time.Second

// run starts env's Run and stops it when the test ends, checking that it
// returns (it waits for its goroutines).
func run(t *testing.T, env *orchestratortest.Env) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); env.Orch.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Run did not return 5 s after its context ended")
		}
	})
}

// Timeouts fire from per-sandbox timers on the injected clock: no wall
// time passes in this test.
func TestTimeoutsFireOnTheClock(t *testing.T) {
	ctx := context.Background()
	clock := orchestratortest.NewClock()
	env := orchestratortest.New(t, orchestrator.Config{Clock: clock})
	o := env.Orch
	killMe := create(t, env, orchestrator.CreateRequest{Timeout: time.Second})
	pauseMe := create(t, env, orchestrator.CreateRequest{Timeout: time.Second, AutoPause: true})
	keep := create(t, env, orchestrator.CreateRequest{Timeout: time.Minute})
	extended := create(t, env, orchestrator.CreateRequest{Timeout: time.Second})
	shortened := create(t, env, orchestrator.CreateRequest{Timeout: time.Hour})
	clock.Advance(2 * time.Second) // before Run nothing fires
	if _, err := o.Get(ctx, team, killMe.ID); err != nil {
		t.Fatalf("expired before Run: %v", err)
	}
	if err := o.SetTimeout(ctx, team, extended.ID, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := o.SetTimeout(ctx, team, shortened.ID, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	run(t, env) // arms the timers: killMe's and pauseMe's fire at once
	testkit.WaitFor(t, reaperWait, "expired sandboxes stopped", func() bool {
		_, errKill := o.Get(ctx, team, killMe.ID)
		p, _ := o.Get(ctx, team, pauseMe.ID)
		return errdefs.IsNotFound(errKill) && p.State == store.StatePaused
	})
	testkit.WaitFor(t, reaperWait, "timers of keep, extended and shortened armed", func() bool { return clock.Pending() == 3 })
	if !slices.Contains(env.Runtime.Killed(), killMe.ID) {
		t.Fatal("runtime kill not called")
	}
	if _, err := env.DB.GetSandbox(ctx, killMe.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("row left: %v", err)
	}
	if env.Runtime.State(pauseMe.ID) != "paused" {
		t.Fatal("autoPause sandbox not paused in the runtime")
	}
	for _, sb := range []store.Sandbox{keep, extended, shortened} {
		if got, err := o.Get(ctx, team, sb.ID); err != nil || got.State != store.StateRunning {
			t.Fatalf("sandbox %s with time left: %+v, %v", sb.ID, got, err)
		}
	}
	clock.Advance(31 * time.Second) // past shortened's new end, not keep's (at 60 s)
	testkit.WaitFor(t, reaperWait, "shortened killed", func() bool {
		_, err := o.Get(ctx, team, shortened.ID)
		return errdefs.IsNotFound(err)
	})
	for _, sb := range []store.Sandbox{keep, extended} {
		if _, err := o.Get(ctx, team, sb.ID); err != nil {
			t.Fatalf("sandbox %s killed before its end: %v", sb.ID, err)
		}
	}
	// A paused sandbox has no timer; a resume arms one for its new end.
	if _, err := o.Resume(ctx, team, pauseMe.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * time.Minute)
	testkit.WaitFor(t, reaperWait, "resumed, keep and extended sandboxes stopped", func() bool {
		p, _ := o.Get(ctx, team, pauseMe.ID)
		_, errExt := o.Get(ctx, team, extended.ID)
		_, errKeep := o.Get(ctx, team, keep.ID)
		return p.State == store.StatePaused && errdefs.IsNotFound(errExt) && errdefs.IsNotFound(errKeep)
	})
	if n := clock.Pending(); n != 0 {
		t.Errorf("%d timers left with no running sandbox", n)
	}
}

// A sandbox that dies on its own (guest kernel panic, crashed VMM) is
// removed and reported as gone from the runtime's Wait; its neighbours
// stay, and a paused sandbox's end is not a death.
func TestSandboxDyingOnItsOwnIsReportedGone(t *testing.T) {
	ctx := context.Background()
	env := orchestratortest.New(t, orchestrator.Config{})
	victim := create(t, env, orchestrator.CreateRequest{})
	neighbour := create(t, env, orchestrator.CreateRequest{})
	paused := create(t, env, orchestrator.CreateRequest{})
	run(t, env)
	if err := env.Orch.Pause(ctx, team, paused.ID); err != nil {
		t.Fatal(err)
	}
	env.Runtime.Crash(paused.ID) // a pause to disk ends the process too
	died := time.Now()
	env.Runtime.Crash(victim.ID)
	testkit.WaitFor(t, reaperWait, "dead sandbox removed", func() bool {
		_, ok := env.Orch.Lookup(victim.ID)
		return !ok
	})
	t.Logf("reported gone %v after its death", time.Since(died))
	if _, err := env.Orch.Get(ctx, team, victim.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Get(dead) = %v, want not found", err)
	}
	if _, ok := env.Orch.Lookup(neighbour.ID); !ok {
		t.Fatal("neighbour removed too")
	}
	if p, err := env.Orch.Get(ctx, team, paused.ID); err != nil || p.State != store.StatePaused {
		t.Fatalf("paused sandbox: %+v, %v", p, err)
	}
}

// Run returns once its context ends, its watches and timers stopped.
func TestRunReturnsAfterItsGoroutines(t *testing.T) {
	env := orchestratortest.New(t, orchestrator.Config{Clock: orchestratortest.NewClock()})
	for range 3 {
		create(t, env, orchestrator.CreateRequest{})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); env.Orch.Run(ctx) }()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run still running 5 s after its context ended")
	}
}
