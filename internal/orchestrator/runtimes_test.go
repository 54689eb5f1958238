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

// TestRecoverLeavesOtherRuntimes: a server restarted without one of the
// backends keeps the rows of that backend's live sandboxes (they still
// run) without adopting them: the API answers ErrUnavailable for them,
// the proxy does not route to them, and a later server with the backend
// adopts them again.
func TestRecoverLeavesOtherRuntimes(t *testing.T) {
	ctx := context.Background()
	other := &renamed{Runtime: orchestratortest.NewRuntime(t), name: "other"}
	env := orchestratortest.New(t, orchestrator.Config{Runtimes: []runtime.Runtime{other}})
	mine := create(t, env, orchestrator.CreateRequest{})
	theirs := create(t, env, orchestrator.CreateRequest{Metadata: map[string]string{orchestrator.MetadataRuntime: "other"}})
	restart := func(rts ...runtime.Runtime) *orchestrator.Orchestrator {
		t.Helper()
		o, err := orchestrator.New(orchestrator.Config{Store: env.DB, Runtimes: rts, EnvdPort: env.Runtime.EnvdPort})
		if err != nil {
			t.Fatal(err)
		}
		if err := o.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		return o
	}
	o := restart(env.Runtime) // without "other"
	if _, err := o.Get(ctx, team, mine.ID); err != nil {
		t.Fatalf("own sandbox not adopted: %v", err)
	}
	if row, err := env.DB.GetSandbox(ctx, theirs.ID); err != nil || row.State != store.StateRunning || row.Runtime != "other" {
		t.Fatalf("other runtime's row: %+v, %v; want it kept as running", row, err)
	}
	if _, ok := o.Lookup(theirs.ID); ok {
		t.Error("other runtime's sandbox is routable")
	}
	for name, err := range map[string]error{
		"get":  func() error { _, err := o.Get(ctx, team, theirs.ID); return err }(),
		"kill": o.Kill(ctx, team, theirs.ID),
	} {
		if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "other runtime") {
			t.Errorf("%s: %v; want ErrUnavailable naming the other runtime", name, err)
		}
	}
	if _, err := o.Get(ctx, "another-team", theirs.ID); !errdefs.IsNotFound(err) {
		t.Errorf("another team's get: %v; want ErrNotFound", err)
	}
	if got := o.Reserved().MemoryMiB; got != mine.MemoryMB+theirs.MemoryMB {
		t.Errorf("reserved memory %d MiB; want both sandboxes' %d", got, mine.MemoryMB+theirs.MemoryMB)
	}
	if !o.TemplatesInUse()[theirs.TemplateID] {
		t.Error("the other runtime's sandbox does not hold its template")
	}
	if slices.Contains(other.Killed(), theirs.ID) || other.State(theirs.ID) != "running" {
		t.Fatalf("other runtime's sandbox was touched: killed %v, state %q", other.Killed(), other.State(theirs.ID))
	}
	// A server with the backend again adopts it.
	o = restart(env.Runtime, other)
	if got, err := o.Get(ctx, team, theirs.ID); err != nil || got.Runtime != "other" {
		t.Fatalf("readopted: %+v, %v", got, err)
	}
}
