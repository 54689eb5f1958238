package container

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/slots"
)

// slotSpec is a create of a template of the tests' rootfs that may use
// and refill slots.
func slotSpec(rootfs string) runtime.Spec {
	return runtime.Spec{TemplateID: "slottpl", RootfsDir: rootfs, VCPUs: 1, MemoryMiB: 256, DiskMiB: 64, Pids: 256}
}

// slotRuntime is a test runtime that keeps one slot per key and starts
// making it at once.
func slotRuntime(t *testing.T, oci string) *Runtime {
	t.Helper()
	old := slotDelay
	slotDelay = 0
	t.Cleanup(func() { slotDelay = old })
	return newTestRuntime(t, oci, WithPrelaunch(1))
}

// idleSlot waits for the refills in flight and returns spec's one idle slot.
func idleSlot(t *testing.T, r *Runtime, spec runtime.Spec) string {
	t.Helper()
	r.slots.Wait()
	ids := r.slots.Idle()[slots.SpecKey(spec)]
	if len(ids) != 1 {
		t.Fatalf("idle slots of %s: %v, want one", spec.TemplateID, r.slots.Idle())
	}
	return ids[0]
}

// assertSlotWaiting checks that slot id's container is created, not
// started: its init is in the sandbox's network namespace and cgroup and
// has run nothing of the sandbox's (no envd anywhere in it).
func assertSlotWaiting(t *testing.T, r *Runtime, id string) {
	t.Helper()
	st, err := r.oci.State(context.Background(), r.containerName(id))
	if err != nil || st.Status != "created" {
		t.Fatalf("slot %s: state %+v, %v; want created", id, st, err)
	}
	if _, err := os.Stat("/run/netns/" + testScope + "-" + id); err != nil {
		t.Errorf("slot %s has no netns: %v", id, err)
	}
	out, _ := exec.Command("pgrep", "-f", "/usr/local/bin/envd").Output()
	for _, pid := range strings.Fields(string(out)) {
		if env, _ := os.ReadFile("/proc/" + pid + "/environ"); strings.Contains(string(env), "MOAT_SANDBOX_ID="+id) {
			t.Errorf("slot %s already runs envd (pid %s)", id, pid)
		}
	}
}

func TestPrelaunchedCreate(t *testing.T) {
	for _, oci := range ociRuntimes(t) {
		t.Run(oci, func(t *testing.T) {
			r := slotRuntime(t, oci)
			ctx := context.Background()
			spec := slotSpec(testRootfs)
			if _, ok := r.Prelaunched(spec); ok {
				t.Fatal("a slot before any create")
			}
			first := create(t, r, spec)
			id := idleSlot(t, r, spec)
			assertSlotWaiting(t, r, id)
			for _, other := range []runtime.Spec{
				{TemplateID: "other", RootfsDir: testRootfs, VCPUs: 1, MemoryMiB: 256, DiskMiB: 64, Pids: 256},
				func() runtime.Spec { s := spec; s.MemoryMiB = 512; return s }(),
				func() runtime.Spec { s := spec; s.Background = true; return s }(),
				func() runtime.Spec {
					s := spec
					s.Volumes = []runtime.VolumeMount{{Source: "/tmp", Target: "/v"}}
					return s
				}(),
			} {
				if got, ok := r.Prelaunched(other); ok {
					t.Errorf("Prelaunched(%+v) = %s: another template, size or kind of create", other, got)
				}
			}
			got, ok := r.Prelaunched(spec)
			if !ok || got != id {
				t.Fatalf("Prelaunched = %q %v, want %s", got, ok, id)
			}
			if _, ok := r.Prelaunched(spec); ok {
				t.Fatal("one slot handed out twice")
			}
			// The orchestrator sets the request's policy under the slot's ID, then creates.
			if err := r.SetEgress(ctx, id, netpolicy.Egress{Internet: true}); err != nil {
				t.Fatal(err)
			}
			spec.ID = id
			h := create(t, r, spec)
			if h.ID != id {
				t.Fatalf("handle %+v", h)
			}
			if st, err := r.oci.State(ctx, r.containerName(id)); err != nil || st.Status != "running" {
				t.Fatalf("after Create: %+v, %v", st, err)
			}
			if code, body, err := get(h, "/health", nil, 5*time.Second); err != nil || code/100 != 2 {
				t.Fatalf("envd of the slot's sandbox: %d %q %v", code, body, err)
			}
			if oci == "crun" { // runc 1.1 cannot exec into these containers (docs/DESIGN.md)
				if out, err := execIn(r, id, "cat", "/etc/hostname"); err != nil || strings.TrimSpace(out) != "sandbox" {
					t.Errorf("hostname %q, %v", out, err)
				}
			}
			// Its create made the next slot.
			next := idleSlot(t, r, spec)
			if next == id {
				t.Fatal("the used slot is idle again")
			}
			killAndCheck(t, r, h)
			killAndCheck(t, r, first)
		})
	}
}

func TestSlotsReleased(t *testing.T) {
	oci := "runc" // TestMain's setup requires it
	r := slotRuntime(t, oci)
	ctx := context.Background()
	spec := slotSpec(testRootfs)
	h := create(t, r, spec)
	check := func(what string, id string) {
		t.Helper()
		if ids := r.slots.Idle()[slots.SpecKey(spec)]; strings.Contains(fmt.Sprint(ids), id) {
			t.Errorf("%s: %s still idle", what, id)
		}
		assertGone(t, r, id, 0)
	}

	// A reserved slot whose create fails before the runtime is killed by ID.
	id := idleSlot(t, r, spec)
	if got, ok := r.Prelaunched(spec); !ok || got != id {
		t.Fatalf("Prelaunched = %q %v", got, ok)
	}
	if err := r.Kill(ctx, id); err != nil {
		t.Fatal(err)
	}
	check("kill of a reserved slot", id)

	// A slot of a template that is gone goes with the prune.
	create(t, r, spec)
	id = idleSlot(t, r, spec)
	if _, err := r.PruneTemplates(ctx, []runtime.Spec{{TemplateID: "other", RootfsDir: testRootfs}}, nil, 0); err != nil {
		t.Fatal(err)
	}
	check("prune of its template", id)

	// A crash: the next server's Recover removes slots (the store does not know them).
	create(t, r, spec)
	id = idleSlot(t, r, spec)
	hs, err := r.Recover(ctx, []string{h.ID})
	if err != nil || len(hs) != 1 || hs[0].ID != h.ID {
		t.Fatalf("Recover = %+v, %v", hs, err)
	}
	check("recover", id)

	// Close kills idle slots and makes no more.
	create(t, r, spec)
	id = idleSlot(t, r, spec)
	if err := r.slots.Close(ctx); err != nil {
		t.Fatal(err)
	}
	check("close", id)
	create(t, r, spec)
	r.slots.Wait()
	if n := len(r.slots.Idle()); n != 0 {
		t.Errorf("slots made after Close: %v", r.slots.Idle())
	}
}

// TestStaleSlot: a template rebuilt between the slot's making and the
// create that reserved it; the slot goes and the create starts afresh
// under the same ID, from the new build.
func TestStaleSlot(t *testing.T) {
	oci := "runc" // TestMain's setup requires it
	r := slotRuntime(t, oci)
	ctx := context.Background()
	rootfs := filepath.Join(t.TempDir(), "tpl", "rootfs")
	if err := os.MkdirAll(filepath.Dir(rootfs), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", testRootfs, rootfs).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if err := os.Chmod(filepath.Dir(filepath.Dir(rootfs)), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := slotSpec(rootfs)
	spec.ID = newID()
	first, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer killAndCheck(t, r, first)
	id := idleSlot(t, r, spec)
	if got, ok := r.Prelaunched(spec); !ok || got != id {
		t.Fatalf("Prelaunched = %q %v", got, ok)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(rootfs), "stamp.json"), []byte(`{"build":"2"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	spec.ID = id
	h, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, err := get(h, "/health", nil, 5*time.Second); err != nil || code/100 != 2 {
		t.Fatalf("envd: %d %v", code, err)
	}
	killAndCheck(t, r, h)
	// The slot made for the new build serves the next create.
	spec.ID = ""
	if next := idleSlot(t, r, spec); next == id {
		t.Fatal("stale slot reused")
	}
}
