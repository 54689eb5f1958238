package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/store"
)

// nodeLoads: a node's load is the memory and number of its sandboxes that
// are not paused, through every change a sandbox row goes through:
// insert, pause and resume, a new memory size, a move to another node,
// delete; a deleted node that registers again finds its sandboxes' load,
// and a node without sandboxes has none.
func nodeLoads(t *testing.T, d Store) {
	ctx := context.Background()
	lease := time.Now().Add(time.Hour)
	for _, id := range []string{"n1", "n2", "n3"} {
		if err := d.RegisterNode(ctx, store.Node{ID: id, MemoryMB: 4096, LeaseUntil: lease}); err != nil {
			t.Fatal(err)
		}
	}
	sb := func(id, node string, mb int, st store.State) store.Sandbox {
		return store.Sandbox{ID: id, Team: "t", TemplateID: "t", State: st, MemoryMB: mb, StartedAt: time.Now(), NodeID: node}
	}
	for _, s := range []store.Sandbox{sb("a", "n1", 512, store.StateRunning), sb("b", "n1", 256, store.StateRunning),
		sb("c", "n1", 1024, store.StatePaused), sb("d", "n2", 128, store.StateRunning), sb("e", "", 64, store.StateRunning)} {
		if err := d.InsertSandbox(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	wantLoads(t, d, "inserted", "n1=768/2 n2=128/1 n3=0/0")
	update := func(id string, f func(*store.Sandbox)) {
		t.Helper()
		s, err := d.GetSandbox(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		f(&s)
		if err := d.UpdateSandbox(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	update("a", func(s *store.Sandbox) { s.State = store.StatePausing })
	wantLoads(t, d, "a pausing", "n1=768/2 n2=128/1 n3=0/0")
	update("a", func(s *store.Sandbox) { s.State = store.StatePaused })
	wantLoads(t, d, "a paused", "n1=256/1 n2=128/1 n3=0/0")
	update("c", func(s *store.Sandbox) { s.State = store.StateResuming })
	wantLoads(t, d, "c resuming", "n1=1280/2 n2=128/1 n3=0/0")
	update("b", func(s *store.Sandbox) { s.MemoryMB = 2048 })
	update("b", func(s *store.Sandbox) { s.Addr = "10.0.0.9:49983" }) // nothing counted changes
	wantLoads(t, d, "b grown", "n1=3072/2 n2=128/1 n3=0/0")
	update("d", func(s *store.Sandbox) { s.NodeID, s.MemoryMB = "n3", 256 })
	update("e", func(s *store.Sandbox) { s.NodeID = "n3" })
	wantLoads(t, d, "d and e moved", "n1=3072/2 n2=0/0 n3=320/2")
	for _, id := range []string{"b", "a"} {
		if err := d.DeleteSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	wantLoads(t, d, "a and b deleted", "n1=1024/1 n2=0/0 n3=320/2")
	if err := d.DeleteNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	wantLoads(t, d, "n1 deleted", "n2=0/0 n3=320/2")
	if err := d.RegisterNode(ctx, store.Node{ID: "n1", MemoryMB: 4096, LeaseUntil: lease}); err != nil {
		t.Fatal(err)
	}
	wantLoads(t, d, "n1 back", "n1=1024/1 n2=0/0 n3=320/2")
}

// wantLoads checks the nodes' loads, "id=MiB/sandboxes …" by ID.
func wantLoads(t *testing.T, d Store, when, want string) {
	t.Helper()
	loads, err := d.NodeLoads(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := ""
	for i, l := range loads {
		if i > 0 {
			got += " "
		}
		got += fmt.Sprintf("%s=%d/%d", l.ID, l.ReservedMB, l.Sandboxes)
	}
	if got != want {
		t.Fatalf("loads (%s) = %s; want %s", when, got, want)
	}
}
