package container

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/slots"
	"github.com/moatsh/moat/internal/testkit"
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

// TestSlotsUnderRace hammers the slots (issue 35: after a burst, one
// sandbox adopted from a slot left everything on the host although its
// kill said "sandbox killed"): workers create from slots and kill, some
// kills racing their create, while another goroutine kills idle slots and
// prunes, racing the hand-outs and the refills. A kill that returns nil
// after its create returned leaves nothing named after the sandbox, and at
// the end nothing of any sandbox or slot is left.
func TestSlotsUnderRace(t *testing.T) {
	requireRuntime(t)
	oci := "crun"
	if _, err := exec.LookPath(oci); err != nil {
		testkit.Missing(t, "crun not on PATH (apt-get install crun)")
	}
	r := slotRuntime(t, oci)
	r.slots.SetWant(2)
	ctx := context.Background()
	spec := slotSpec(testRootfs)
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
	)
	note := func(id string) {
		mu.Lock()
		seen[id] = true
		mu.Unlock()
	}
	stop := make(chan struct{})
	var reaper sync.WaitGroup
	reaper.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(mrand.IntN(30)) * time.Millisecond):
			}
			for _, ids := range r.slots.Idle() {
				for _, id := range ids {
					note(id)
					if err := r.Kill(ctx, id); err != nil {
						t.Errorf("kill idle slot %s: %v", id, err)
					}
				}
			}
			if i%3 == 0 {
				if _, err := r.PruneTemplates(ctx, []runtime.Spec{spec}, nil, 0); err != nil {
					t.Errorf("prune: %v", err)
				}
			}
		}
	})
	var workers sync.WaitGroup
	for w := range 3 {
		workers.Go(func() {
			for i := range 6 {
				s := spec
				if id, ok := r.Prelaunched(s); ok {
					s.ID = id
				} else {
					s.ID = newID()
				}
				note(s.ID)
				if (w+i)%2 == 0 {
					// The kill races the create: whichever wins, a kill
					// after both leaves nothing.
					var k sync.WaitGroup
					k.Go(func() {
						time.Sleep(time.Duration(mrand.IntN(200)) * time.Millisecond)
						_ = r.Kill(ctx, s.ID)
					})
					_, _ = r.Create(ctx, s)
					k.Wait()
				} else if _, err := r.Create(ctx, s); err != nil {
					t.Errorf("create %s: %v", s.ID, err)
					continue
				}
				if err := r.Kill(ctx, s.ID); err != nil {
					t.Errorf("kill %s: %v", s.ID, err)
				}
				// The kernel lets go of an autoclear loop device a moment
				// after its last unmount.
				for deadline := time.Now().Add(10 * time.Second); len(loopsOf(s.ID)) > 0 && time.Now().Before(deadline); {
					time.Sleep(50 * time.Millisecond)
				}
				assertGone(t, r, s.ID, 0)
			}
		})
	}
	workers.Wait()
	close(stop)
	reaper.Wait()
	if err := r.slots.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for id := range seen {
		assertGone(t, r, id, 0)
	}
	if left, _ := os.ReadDir(filepath.Join(r.dataDir, "sandboxes")); len(left) > 0 {
		t.Errorf("sandbox dirs left: %v", left)
	}
	if netns, _ := filepath.Glob("/run/netns/" + testScope + "-*"); len(netns) > 0 {
		t.Errorf("netns left: %v", netns)
	}
	t.Logf("%d sandboxes and slots", len(seen))
}
