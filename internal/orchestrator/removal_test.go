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

// TestOnRemove: the OnRemove funcs (the proxy's CloseSandbox) hear of
// every sandbox that leaves the routing table, killed or timed out, once
// Lookup no longer finds it; pausing is not a removal.
func TestOnRemove(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env := orchestratortest.New(t, orchestrator.Config{})
	o := env.Orch
	var mu sync.Mutex
	var removed []string
	o.OnRemove(func(id string) {
		if _, ok := o.Lookup(id); ok {
			t.Errorf("%s still routable when OnRemove is called", id)
		}
		mu.Lock()
		removed = append(removed, id)
		mu.Unlock()
	})
	has := func(id string) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(removed, id)
	}
	killed := create(t, env, orchestrator.CreateRequest{})
	paused := create(t, env, orchestrator.CreateRequest{})
	if err := o.Kill(ctx, team, killed.ID); err != nil {
		t.Fatal(err)
	}
	if err := o.Pause(ctx, team, paused.ID); err != nil {
		t.Fatal(err)
	}
	if !has(killed.ID) || has(paused.ID) {
		t.Fatalf("removed %v; want %s only", removed, killed.ID)
	}
	expired := create(t, env, orchestrator.CreateRequest{Timeout: time.Second})
	go o.Run(ctx)
	testkit.WaitFor(t, 10*time.Second, "the timed-out sandbox to be reported removed", func() bool { return has(expired.ID) })
}
