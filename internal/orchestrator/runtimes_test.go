package orchestrator_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/orchestrator/orchestratortest"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
)

// renamed is a second fake backend under another name.
type renamed struct {
	*orchestratortest.Runtime
	name string
}

func (r *renamed) Name() string { return r.name }

// TestRuntimeChoice: one orchestrator, two backends; metadata, then the
// template, then the default pick a sandbox's; lifecycle calls and
// recovery go to the sandbox's own.
func TestRuntimeChoice(t *testing.T) {
	ctx := context.Background()
	other := &renamed{Runtime: orchestratortest.NewRuntime(t), name: "other"}
	env := orchestratortest.New(t, orchestrator.Config{Runtimes: []runtime.Runtime{other}})
	if got := env.Orch.Runtimes(); !slices.Equal(got, []string{"fake", "other"}) {
		t.Fatalf("runtimes %v", got)
	}
	dflt := create(t, env, orchestrator.CreateRequest{})
	picked := create(t, env, orchestrator.CreateRequest{Metadata: map[string]string{orchestrator.MetadataRuntime: "other"}})
	if dflt.Runtime != "fake" || picked.Runtime != "other" || env.Runtime.Count() != 1 || other.Count() != 1 {
		t.Fatalf("runtimes %q, %q; fake has %d, other %d", dflt.Runtime, picked.Runtime, env.Runtime.Count(), other.Count())
	}
	_, err := env.Orch.Create(ctx, orchestrator.CreateRequest{Team: team, Template: "base", Timeout: time.Minute,
		Metadata: map[string]string{orchestrator.MetadataRuntime: "vm"}})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "fake, other") {
		t.Fatalf("unknown runtime: %v; want ErrInvalidArgument naming fake, other", err)
	}
	tpl, err := env.DB.GetTemplate(ctx, "base")
	if err != nil {
		t.Fatal(err)
	}
	tpl.Runtime = "other"
	if err := env.DB.UpsertTemplate(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	byTemplate := create(t, env, orchestrator.CreateRequest{})
	if byTemplate.Runtime != "other" || other.Count() != 2 {
		t.Fatalf("template runtime: sandbox on %q", byTemplate.Runtime)
	}
	if err := env.Orch.Pause(ctx, team, picked.ID); err != nil {
		t.Fatal(err)
	}
	if other.State(picked.ID) != "paused" {
		t.Fatalf("pause went elsewhere: other has %q", other.State(picked.ID))
	}
	if err := env.Orch.Kill(ctx, team, byTemplate.ID); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(other.Killed(), byTemplate.ID) || slices.Contains(env.Runtime.Killed(), byTemplate.ID) {
		t.Fatalf("kill went elsewhere: fake killed %v, other %v", env.Runtime.Killed(), other.Killed())
	}
	// A restarted orchestrator with both backends adopts both sandboxes.
	o2, err := orchestrator.New(orchestrator.Config{Store: env.DB, Runtimes: []runtime.Runtime{env.Runtime, other},
		EnvdPort: env.Runtime.EnvdPort})
	if err != nil {
		t.Fatal(err)
	}
	if err := o2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []store.Sandbox{dflt, picked} {
		got, err := o2.Get(ctx, team, want.ID)
		if err != nil || got.Runtime != want.Runtime {
			t.Fatalf("after recover: %s on %q, %v; want %q", want.ID, got.Runtime, err, want.Runtime)
		}
	}
	if err := o2.Kill(ctx, team, picked.ID); err != nil || !slices.Contains(other.Killed(), picked.ID) {
		t.Fatalf("kill after recover: %v; other killed %v", err, other.Killed())
	}
}
