package runtimeset_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/orchestrator/orchestratortest"
	"github.com/moatsh/moat/internal/orchestrator/runtimeset"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
)

// named is the fake runtime under another name.
type named struct {
	*orchestratortest.Runtime
	name string
}

func (n named) Name() string { return n.name }

// plain is a runtime without optional capabilities (no snapshots, no egress).
type plain struct{ runtime.Runtime }

func TestSet(t *testing.T) {
	ctx := context.Background()
	a := named{orchestratortest.NewRuntime(t), "a"}
	b := named{orchestratortest.NewRuntime(t), "b"}
	if _, err := runtimeset.New(nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("no runtime: %v", err)
	}
	if _, err := runtimeset.New([]runtime.Runtime{a, a}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("a runtime twice: %v", err)
	}
	s, err := runtimeset.New([]runtime.Runtime{nil, a, plain{b}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Name() != "a" || !slices.Equal(s.Names(), []string{"a", "b"}) {
		t.Fatalf("names %s %v", s.Name(), s.Names())
	}
	if _, err := s.Named("c"); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "a, b") {
		t.Fatalf("unknown name: %v", err)
	}
	if !s.Snapshots("a") || s.Snapshots("b") || s.Snapshots("c") {
		t.Fatal("Snapshots: want a only")
	}

	// Calls go to the sandbox's backend.
	if _, err := s.Create(ctx, runtime.Spec{ID: "ib", Runtime: "b"}); err != nil {
		t.Fatal(err)
	}
	if b.Count() != 1 || a.Count() != 0 {
		t.Fatalf("create on b: a has %d, b %d", a.Count(), b.Count())
	}
	if err := s.Snapshot(ctx, "ib", "snap1"); !errors.Is(err, errdefs.ErrNotImplemented) {
		t.Fatalf("snapshot on b: %v", err)
	}
	if err := s.ApplyEgress(ctx, store.Sandbox{ID: "ib", Runtime: "b", Network: store.Network{DenyOut: []string{"10.0.0.0/8"}}}); !errors.Is(err, errdefs.ErrNotImplemented) {
		t.Fatalf("denyOut on a runtime without policy: %v", err)
	}
	if err := s.Pause(ctx, "unknown"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("pause unknown: %v", err)
	}
	if err := s.Kill(ctx, "ib"); err != nil || b.Count() != 0 {
		t.Fatalf("kill: %v, %d left", err, b.Count())
	}
	// An ID of no known backend is killed on every one.
	if err := s.Kill(ctx, "unknown"); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(a.Killed(), "unknown") {
		t.Fatal("unknown ID not killed on a")
	}
}
