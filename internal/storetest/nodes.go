package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
)

// nodes: the node registry's register, renew, lose and return.
func nodes(t *testing.T, d Store) {
	ctx := context.Background()
	t0 := time.Unix(1_800_000_000, 0).UTC()
	n := store.Node{ID: "n1", Addr: "10.0.0.1:7070", Runtimes: []string{"container", "vm"}, MemoryMB: 20480, CPUs: 2,
		Version: "dev", StartedAt: t0, LeaseUntil: t0.Add(10 * time.Second)}
	if err := d.RegisterNode(ctx, n); err != nil {
		t.Fatal(err)
	}
	if err := d.RegisterNode(ctx, store.Node{ID: "n2", LeaseUntil: t0.Add(5 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []store.Node{{LeaseUntil: t0}, {ID: "x"}} {
		if err := d.RegisterNode(ctx, bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("register %+v: %v, want ErrInvalidArgument", bad, err)
		}
	}
	got, err := d.GetNode(ctx, "n1")
	if err != nil || got.Addr != n.Addr || !equal(got.Runtimes, n.Runtimes) || got.MemoryMB != 20480 || got.CPUs != 2 ||
		!got.StartedAt.Equal(t0) || !got.LeaseUntil.Equal(n.LeaseUntil) || got.Lost {
		t.Fatalf("get n1: %+v, %v", got, err)
	}
	if _, err := d.GetNode(ctx, "nope"); !errdefs.IsNotFound(err) {
		t.Fatalf("get unknown: %v", err)
	}
	// Renewals move the lease forward, never back.
	if err := d.RenewNodeLease(ctx, "n1", t0.Add(20*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := d.RenewNodeLease(ctx, "n1", t0.Add(15*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.GetNode(ctx, "n1"); !got.LeaseUntil.Equal(t0.Add(20 * time.Second)) {
		t.Fatalf("lease moved back to %s", got.LeaseUntil)
	}
	if err := d.RenewNodeLease(ctx, "nope", t0); !errdefs.IsNotFound(err) {
		t.Fatalf("renew unknown: %v", err)
	}
	// Its warm templates: none at first, then what it says, in loads too.
	if got, _ := d.GetNode(ctx, "n1"); len(got.Warm) != 0 {
		t.Fatalf("warm templates of a new node: %v", got.Warm)
	}
	if err := d.SetNodeWarm(ctx, "n1", []string{"tpl-a", "tpl-b"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.GetNode(ctx, "n1"); !equal(got.Warm, []string{"tpl-a", "tpl-b"}) {
		t.Fatalf("warm templates: %v", got.Warm)
	}
	if loads, err := d.NodeLoads(ctx); err != nil || len(loads) != 2 || !equal(loads[0].Warm, []string{"tpl-a", "tpl-b"}) || len(loads[1].Warm) != 0 {
		t.Fatalf("loads' warm templates: %+v, %v", loads, err)
	}
	if err := d.SetNodeWarm(ctx, "nope", nil); !errdefs.IsNotFound(err) {
		t.Fatalf("warm templates of an unknown node: %v", err)
	}
	// n2's lease ends first: lost once, and its renewal is refused.
	lost, err := d.MarkLostNodes(ctx, t0.Add(6*time.Second))
	if err != nil || !equal(lost, []string{"n2"}) {
		t.Fatalf("mark lost at +6s: %v, %v", lost, err)
	}
	if lost, _ := d.MarkLostNodes(ctx, t0.Add(7*time.Second)); len(lost) != 0 {
		t.Fatalf("n2 lost twice: %v", lost)
	}
	if err := d.RenewNodeLease(ctx, "n2", t0.Add(30*time.Second)); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("renew of a lost node: %v, want ErrFailedPrecondition", err)
	}
	all, err := d.ListNodes(ctx)
	if err != nil || len(all) != 2 || all[0].ID != "n1" || all[0].Lost || !all[1].Lost {
		t.Fatalf("list: %+v, %v", all, err)
	}
	// It registers again: alive.
	if err := d.RegisterNode(ctx, store.Node{ID: "n2", LeaseUntil: t0.Add(40 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.GetNode(ctx, "n2"); got.Lost || !got.LeaseUntil.Equal(t0.Add(40*time.Second)) {
		t.Fatalf("n2 after registering again: %+v", got)
	}
	if err := d.DeleteNode(ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteNode(ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	if all, _ := d.ListNodes(ctx); len(all) != 1 {
		t.Fatalf("after delete: %+v", all)
	}
}

// sandboxNodes: a sandbox row keeps its node, and lists filter by it.
func sandboxNodes(t *testing.T, d Store) {
	ctx := context.Background()
	start := time.Now().UTC()
	for i, node := range []string{"n1", "n2", "n1", ""} {
		s := store.Sandbox{ID: "s" + string(rune('a'+i)), Team: "t", TemplateID: "t", State: store.StateRunning,
			StartedAt: start.Add(time.Duration(i) * time.Second), NodeID: node}
		if err := d.InsertSandbox(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := d.GetSandbox(ctx, "sa"); got.NodeID != "n1" {
		t.Fatalf("node of sa: %q", got.NodeID)
	}
	got, err := d.ListSandboxes(ctx, store.SandboxFilter{NodeID: "n1", Order: "asc"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range got {
		ids = append(ids, s.ID)
	}
	if !equal(ids, []string{"sa", "sc"}) {
		t.Fatalf("sandboxes on n1: %v", ids)
	}
	s, _ := d.GetSandbox(ctx, "sd")
	s.NodeID = "n2"
	if err := d.UpdateSandbox(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.GetSandbox(ctx, "sd"); got.NodeID != "n2" {
		t.Fatalf("node of sd after update: %q", got.NodeID)
	}
}
