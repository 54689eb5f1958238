package orchestrator_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/orchestrator/orchestratortest"
	"github.com/moatsh/moat/internal/testkit"
)

// TestKillHooks: the OnKill funcs (the proxy's CloseSandbox) hear of a
// sandbox about to be killed, by request or timeout, while the runtime
// still runs it, so that the proxy's resets reach it before its network
// goes; the OnRemove funcs (CloseSandbox again) hear of every sandbox
// that leaves the routing table, once Lookup no longer finds it. Pausing
// is neither.
func TestKillHooks(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env := orchestratortest.New(t, orchestrator.Config{})
	o := env.Orch
	var mu sync.Mutex
	heard := map[string][]string{} // hook → IDs
	o.OnKill(func(id string) {
		if slices.Contains(env.Runtime.Killed(), id) {
			t.Errorf("%s already killed when OnKill is called", id)
		}
		mu.Lock()
		heard["kill"] = append(heard["kill"], id)
		mu.Unlock()
	})
	o.OnRemove(func(id string) {
		if _, ok := o.Lookup(id); ok {
			t.Errorf("%s still routable when OnRemove is called", id)
		}
		mu.Lock()
		heard["remove"] = append(heard["remove"], id)
		mu.Unlock()
	})
	both := func(id string) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(heard["kill"], id) && slices.Contains(heard["remove"], id)
	}
	heardOf := func(id string) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(heard["kill"], id) || slices.Contains(heard["remove"], id)
	}
	killed := create(t, env, orchestrator.CreateRequest{})
	paused := create(t, env, orchestrator.CreateRequest{})
	if err := o.Kill(ctx, team, killed.ID); err != nil {
		t.Fatal(err)
	}
	if err := o.Pause(ctx, team, paused.ID); err != nil {
		t.Fatal(err)
	}
	if !both(killed.ID) || heardOf(paused.ID) {
		t.Fatalf("heard %v; want %s only", heard, killed.ID)
	}
	expired := create(t, env, orchestrator.CreateRequest{Timeout: time.Second})
	go o.Run(ctx)
	testkit.WaitFor(t, 10*time.Second, "the timed-out sandbox to be reported to both hooks", func() bool { return both(expired.ID) })
}
