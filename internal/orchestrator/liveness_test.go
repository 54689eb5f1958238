package orchestrator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/orchestrator/orchestratortest"
)

// A sandbox that dies on its own (guest kernel panic, crashed VMM) is
// removed and reported as gone; its neighbours stay.
func TestSandboxDyingOnItsOwnIsReportedGone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env := orchestratortest.New(t, orchestrator.Config{})
	victim := create(t, env, orchestrator.CreateRequest{})
	neighbour := create(t, env, orchestrator.CreateRequest{})
	go env.Orch.Run(ctx)

	_ = env.Runtime.Kill(ctx, victim.ID) // dies behind the orchestrator's back
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := env.Orch.Lookup(victim.ID); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("dead sandbox still listed after 5 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := env.Orch.Get(ctx, team, victim.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Get(dead) = %v, want not found", err)
	}
	if _, ok := env.Orch.Lookup(neighbour.ID); !ok {
		t.Fatal("neighbour removed too")
	}
}
