package vm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/cgroups"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/slots"
	"github.com/moatsh/moat/internal/runtime/vm/snapshot"
)

// slotRuntime is the shared runtime with one slot per key for this test,
// and a context for its calls.
func slotRuntime(t *testing.T) (*Runtime, context.Context) {
	r := testRuntime(t)
	withSlots(t, r, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return r, ctx
}

// withSlots turns slots on for one test on the shared runtime; its idle
// slots are killed (and checked gone) when the test ends.
func withSlots(t *testing.T, r *Runtime, n int) {
	t.Helper()
	r.slots.SetWant(n)
	t.Cleanup(func() {
		r.slots.SetWant(0)
		r.slots.Wait()
		idle := r.slots.Idle()
		if err := r.slots.Drop(context.Background(), func(string) bool { return true }); err != nil {
			t.Error(err)
		}
		for _, ids := range idle {
			for _, id := range ids {
				checkGone(t, r, id)
			}
		}
	})
}

// slotCount is how many idle slots serve spec.
func slotCount(r *Runtime, spec runtime.Spec) int {
	return r.slots.Count(slots.SpecKey(withDefaults(spec)))
}

// waitSlot waits until spec's key has n idle slots.
func waitSlot(t *testing.T, r *Runtime, spec runtime.Spec, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for slotCount(r, spec) != n {
		if time.Now().After(deadline) {
			t.Fatalf("idle slots = %d after a minute, want %d", slotCount(r, spec), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// slotAfterCreate creates a sandbox (killed when the test ends) and
// returns its spec and the slot its create left, reserved.
func slotAfterCreate(t *testing.T, r *Runtime) (runtime.Spec, string) {
	t.Helper()
	spec := testSpec(newID())
	createSpec(t, r, spec)
	waitSlot(t, r, spec, 1)
	id, ok := r.Prelaunched(testSpec(newID()))
	if !ok {
		t.Fatal("no slot after a create")
	}
	if slotCount(r, spec) != 0 {
		t.Fatal("a reserved slot is still idle")
	}
	return spec, id
}

// idleSlot is the ID of spec's first idle slot.
func idleSlot(r *Runtime, spec runtime.Spec) string {
	return r.slots.Idle()[slots.SpecKey(withDefaults(spec))][0]
}

// checkGone fails unless nothing named after id is left: QEMU, directory,
// network namespace, network slot, cgroup.
func checkGone(t *testing.T, r *Runtime, id string) {
	t.Helper()
	if pids := qemuPIDs(r.sandboxDir(id)); len(pids) > 0 {
		t.Errorf("%s: QEMU processes %v left", id, pids)
	}
	if _, err := os.Stat(r.sandboxDir(id)); err == nil {
		t.Errorf("%s: directory left", id)
	}
	if _, err := os.Stat(filepath.Join("/run/netns", testScope+"-"+id)); err == nil {
		t.Errorf("%s: netns left", id)
	}
	if _, ok := r.net.Lookup(id); ok {
		t.Errorf("%s: network still allocated", id)
	}
	if !cgroupGone(r, id) {
		t.Errorf("%s: cgroup left", id)
	}
}

// slotStatus is the run state of slot id's QEMU over its own QMP socket.
func slotStatus(t *testing.T, r *Runtime, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, ok := r.boxes.Lookup(id)
	if !ok {
		t.Fatalf("slot %s: no bookkeeping", id)
	}
	b.mu.Lock()
	c := b.qmp
	b.mu.Unlock()
	var st struct {
		Status string `json:"status"`
	}
	if err := c.Execute(ctx, "query-status", nil, &st); err != nil {
		t.Fatalf("slot %s: query-status: %v", id, err)
	}
	return st.Status
}

// A create of the template makes a slot (a QEMU waiting for the snapshot);
// the next create with its ID restores into that same QEMU, works like any
// sandbox, and the slot is made again.
func TestPrelaunchedCreate(t *testing.T) {
	r, ctx := slotRuntime(t)
	if _, ok := r.Prelaunched(testSpec(newID())); ok {
		t.Fatal("a slot before any create of the template")
	}
	spec, id := slotAfterCreate(t, r)
	if st := slotStatus(t, r, id); st != "inmigrate" {
		t.Errorf("slot's QEMU is %q, want inmigrate (waiting for the snapshot)", st)
	}
	pids := qemuPIDs(r.sandboxDir(id))
	if len(pids) != 1 {
		t.Fatalf("slot QEMU processes %v, want one", pids)
	}
	s := testSpec(id)
	s.AllowInternet = true
	h, err := r.Create(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Kill(context.Background(), h.ID) })
	if h.PID != pids[0] {
		t.Errorf("created in QEMU %d, want the slot's %d", h.PID, pids[0])
	}
	if out, err := run(h, "user", 30*time.Second, "echo", "slot"); err != nil || out != "slot\n" {
		t.Fatalf("run in a sandbox from a slot = %q, %v", out, err)
	}
	if m, err := snapshot.ReadMeta(r.sandboxDir(id)); err != nil || !m.AllowInternet {
		t.Errorf("meta of a sandbox from a slot: %+v, %v; want the create's AllowInternet", m, err)
	}
	// Full weight again (slots wait at the background weight).
	if bg, err := isBackground(r.cgroupPath(id)); err != nil || bg {
		t.Errorf("sandbox from a slot in the background: %v, %v", bg, err)
	}
	waitSlot(t, r, spec, 1) // made again
	if err := r.Kill(ctx, id); err != nil {
		t.Fatal(err)
	}
	checkGone(t, r, id)
	// Pool members, snapshots and volumes take none.
	for name, s := range map[string]runtime.Spec{
		"background": func() runtime.Spec { s := testSpec(newID()); s.Background = true; return s }(),
		"snapshot":   func() runtime.Spec { s := testSpec(newID()); s.Snapshot = "x"; return s }(),
		"volumes": func() runtime.Spec {
			s := testSpec(newID())
			s.Volumes = []runtime.VolumeMount{{Source: "/tmp", Target: "/mnt"}}
			return s
		}(),
		"other size": func() runtime.Spec { s := testSpec(newID()); s.MemoryMiB = 384; return s }(),
	} {
		if id, ok := r.Prelaunched(s); ok {
			t.Errorf("%s: got slot %s", name, id)
		}
	}
}

// A reserved slot that is never created goes with Kill of its ID; idle
// ones go when their template is no longer current and when the runtime
// closes, which also stops making them.
func TestSlotsReleased(t *testing.T) {
	r, ctx := slotRuntime(t)
	spec, id := slotAfterCreate(t, r)
	if err := r.Kill(ctx, id); err != nil {
		t.Fatal(err)
	}
	checkGone(t, r, id)

	r.refillSlots(spec, mustSnap(t, r, spec))
	waitSlot(t, r, spec, 1)
	idle := idleSlot(r, spec)
	if err := r.slots.DropStale(ctx, []runtime.Spec{{TemplateID: "other", RootfsDir: spec.RootfsDir}}); err != nil {
		t.Fatal(err)
	}
	if slotCount(r, spec) != 0 {
		t.Fatal("slot of a template no longer current kept")
	}
	checkGone(t, r, idle)
	r.refillSlots(spec, mustSnap(t, r, spec))
	waitSlot(t, r, spec, 1)
	if err := r.slots.DropStale(ctx, []runtime.Spec{spec}); err != nil || slotCount(r, spec) != 1 {
		t.Fatalf("slot of a current template dropped: %d, %v", slotCount(r, spec), err)
	}
	idle = idleSlot(r, spec)
	if err := r.slots.Close(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.slots.Reopen()
	checkGone(t, r, idle)
	r.refillSlots(spec, mustSnap(t, r, spec))
	r.slots.Wait()
	if n := slotCount(r, spec); n != 0 {
		t.Fatalf("closed runtime made %d slots", n)
	}
}

// A slot made for another snapshot is released and the create launches
// anew under the slot's ID.
func TestStaleSlot(t *testing.T) {
	r, ctx := slotRuntime(t)
	_, id := slotAfterCreate(t, r)
	old := qemuPIDs(r.sandboxDir(id))
	b, _ := r.boxes.Lookup(id)
	b.mu.Lock()
	b.slot.SnapDir = "/nonexistent"
	b.mu.Unlock()
	h2, err := r.Create(ctx, testSpec(id))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Kill(context.Background(), h2.ID) })
	if len(old) != 1 || h2.PID == old[0] {
		t.Errorf("created in QEMU %d; the stale slot's was %v", h2.PID, old)
	}
	if _, err := run(h2, "user", 30*time.Second, "true"); err != nil {
		t.Fatal(err)
	}
	if err := r.Kill(ctx, id); err != nil {
		t.Fatal(err)
	}
	checkGone(t, r, id)
}

// isBackground reads the CPU weight of cgroup path: the lowest means
// background (cgroups.SetBackground).
func isBackground(path string) (bool, error) {
	for _, d := range cgroups.Dirs(path) {
		for _, f := range []string{"cpu.weight", "cpu.shares"} {
			if b, err := os.ReadFile(filepath.Join(d, f)); err == nil {
				v := strings.TrimSpace(string(b))
				return v == "1" || v == "2", nil
			}
		}
	}
	return false, os.ErrNotExist
}

func mustSnap(t *testing.T, r *Runtime, spec runtime.Spec) *snapshot.Snapshot {
	t.Helper()
	s, err := r.tpl.Ensure(context.Background(), withDefaults(spec))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
