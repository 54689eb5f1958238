package vm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/vm/kept"
	"github.com/moatsh/moat/internal/runtime/vm/memfile"
	"github.com/moatsh/moat/internal/runtime/vm/qemu"
	"github.com/moatsh/moat/internal/testkit"
)

// withKept makes the shared runtime keep up to n paused sandboxes' QEMUs
// for ttl during one test; what it still keeps is released at the end.
func withKept(t testing.TB, r *Runtime, n int, ttl time.Duration) {
	t.Helper()
	old := r.kept
	r.kept = kept.New(n, ttl, r.releaseKept)
	t.Cleanup(func() {
		r.kept.Close()
		r.kept = old
	})
}

// isKept reports whether paused sandbox id still has its kept QEMU.
func isKept(r *Runtime, id string) bool {
	b, ok := r.boxes.Lookup(id)
	if !ok {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.kept
}

// waitReleased waits until sandbox id's kept QEMU was let go.
func waitReleased(t *testing.T, r *Runtime, id string) {
	t.Helper()
	testkit.WaitFor(t, time.Minute, id+"'s kept QEMU released", func() bool { return !isKept(r, id) })
}

// assertKeptWhilePaused checks that paused sandbox h kept its QEMU,
// stopped, its network and cgroup, and that it looks paused all the same.
func assertKeptWhilePaused(t *testing.T, r *Runtime, h *runtime.Handle) {
	t.Helper()
	if !isKept(r, h.ID) {
		t.Fatal("QEMU not kept")
	}
	if pids := qemuPIDs(r.sandboxDir(h.ID)); !slices.Contains(pids, h.PID) {
		t.Errorf("kept QEMU %d is gone (processes %v)", h.PID, pids)
	}
	if _, err := os.Stat(r.statePath(h.ID)); err != nil {
		t.Errorf("no saved state: %v", err) // a crash now finds it paused
	}
	if _, ok := r.net.Lookup(h.ID); !ok || cgroupGone(r, h.ID) {
		t.Error("kept QEMU lost its network or cgroup")
	}
	b, _ := r.boxes.Lookup(h.ID)
	b.mu.Lock()
	st, err := qemu.Status(context.Background(), b.qmp)
	b.mu.Unlock()
	if err != nil || st == "running" {
		t.Errorf("kept QEMU status %q, %v; want stopped", st, err)
	}
	// A negative check: in 2 s the stopped QEMU uses next to no CPU.
	cpu0 := cpuTicks(t, h.PID)
	time.Sleep(2 * time.Second)
	if d := cpuTicks(t, h.PID) - cpu0; d > 20 { // clock ticks (10 ms each)
		t.Errorf("a kept, stopped QEMU used %d ticks of CPU in 2 s", d)
	}
	if _, err := r.Wait(context.Background(), h.ID); !errdefs.IsNotFound(err) {
		t.Errorf("Wait on a paused sandbox = %v, want not found", err)
	}
	if st, err := r.Stats(context.Background(), h.ID); err != nil || st.MemoryBytes != 0 {
		t.Errorf("Stats of a paused sandbox = %+v, %v; want zero", st, err)
	}
}

// cpuTicks is process pid's user plus system time in clock ticks.
func cpuTicks(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		t.Fatal(err)
	}
	// After "pid (comm) ": state is field 3, utime and stime 14 and 15.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		t.Fatalf("stat of %d: %q", pid, b)
	}
	u, _ := strconv.Atoi(f[11])
	s, _ := strconv.Atoi(f[12])
	return u + s
}

func TestKeptResume(t *testing.T) {
	r := testRuntime(t)
	withKept(t, r, 1, time.Hour)
	ctx := context.Background()
	h, c := createCountingPaused(t, r)
	assertKeptWhilePaused(t, r, h)
	if err := r.Pause(ctx, h.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Pause of a paused sandbox: %v", err)
	}
	time.Sleep(3 * time.Second) // the pause lasts 3 s: the guest's clock must catch up after it
	h2, err := r.Resume(ctx, h.ID)
	if err != nil {
		t.Fatal(err)
	}
	if h2.Paused || h2.PID != h.PID || h2.Addr != h.Addr {
		t.Errorf("handle after a kept resume %+v (before %+v)", h2, h)
	}
	if _, err := os.Stat(r.statePath(h.ID)); !os.IsNotExist(err) {
		t.Errorf("state after resume: %v", err)
	}
	checkGuestClock(t, h2)
	if got := sh(t, h2, "cat /root/file /dev/shm/value"); got != "on-disk\nin-ram" {
		t.Errorf("files after resume: %q", got)
	}
	if c2 := waitCounterAbove(t, h2, c); c2 <= c {
		t.Errorf("counter %d after %d", c2, c)
	}
	// Paused again and killed while kept: nothing is left.
	time.Sleep(time.Second) // linkwatch: see docs/pause.md
	if err := r.Pause(ctx, h.ID); err != nil {
		t.Fatal(err)
	}
	if !isKept(r, h.ID) {
		t.Fatal("second pause did not keep its QEMU")
	}
	killAndCheck(t, r, h2)
}

func TestKeptReleased(t *testing.T) {
	r := testRuntime(t)
	withKept(t, r, 1, time.Hour)
	ctx := context.Background()
	a, b := create(t, r), create(t, r)
	for _, h := range []*runtime.Handle{a, b} {
		sh(t, h, "echo "+h.ID+" > /dev/shm/value")
		if err := r.Pause(ctx, h.ID); err != nil {
			t.Fatal(err)
		}
	}
	// One is kept: a, paused first, is let go.
	waitReleased(t, r, a.ID)
	assertGoneWhilePaused(t, r, a.ID)
	if !isKept(r, b.ID) {
		t.Fatal("the newest pause lost its QEMU")
	}
	for _, h := range []*runtime.Handle{a, b} {
		h2, err := r.Resume(ctx, h.ID)
		if err != nil {
			t.Fatal(err)
		}
		if kept := h2.PID == h.PID; kept != (h == b) {
			t.Errorf("%s resumed in QEMU %d (before %d)", h.ID, h2.PID, h.PID)
		}
		if got := sh(t, h2, "cat /dev/shm/value"); got != h.ID {
			t.Errorf("after resume: %q", got)
		}
	}
	// Kept for at most its time.
	time.Sleep(time.Second) // linkwatch: a pause within a second of the resume waits (docs/pause.md)
	withKept(t, r, 2, 300*time.Millisecond)
	if err := r.Pause(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	waitReleased(t, r, b.ID)
	assertGoneWhilePaused(t, r, b.ID)
	// Close (a server's shutdown) lets every kept QEMU go.
	withKept(t, r, 2, time.Hour)
	if err := r.Pause(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	r.kept.Close()
	if isKept(r, a.ID) {
		t.Fatal("kept after Close")
	}
	assertGoneWhilePaused(t, r, a.ID)
	for _, h := range []*runtime.Handle{a, b} {
		h2, err := r.Resume(ctx, h.ID)
		if err != nil {
			t.Fatal(err)
		}
		killAndCheck(t, r, h2)
	}
}

// TestKeptRecover plays a crash of the server while it kept a paused
// sandbox's QEMU: the next one finds the sandbox paused and quits it.
func TestKeptRecover(t *testing.T) {
	r := testRuntime(t)
	withKept(t, r, 1, time.Hour)
	ctx := context.Background()
	h := create(t, r)
	sh(t, h, "echo kept-in-ram > /dev/shm/value")
	if err := r.Pause(ctx, h.ID); err != nil {
		t.Fatal(err)
	}
	dropQMP(r, h.ID)
	r2 := restarted(t, r)
	hs, err := r2.Recover(ctx, []string{h.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || !hs[0].Paused {
		t.Fatalf("Recover = %+v, want %s paused", hs, h.ID)
	}
	if pids := qemuPIDs(r.sandboxDir(h.ID)); len(pids) > 0 {
		t.Errorf("the kept QEMU outlived the crash: %v", pids)
	}
	resumeInRestarted(t, r, r2, h.ID, "cat /dev/shm/value", "kept-in-ram")
}

// TestPauseResumeFilledMemory makes BenchmarkPauseResume's checks in one
// round at a small size: a guest that wrote 64 MiB into a tmpfs finds the
// file and its round marker, byte for byte, after a pause right after the
// writes (hot) continued in the kept QEMU, after a pause of memory the
// host had written back (idle), and after a resume in a new QEMU once the
// kept one was let go.
func TestPauseResumeFilledMemory(t *testing.T) {
	const mib = 64
	r := testRuntime(t)
	withKept(t, r, 1, time.Hour)
	ctx := context.Background()
	h := create(t, r)
	id := h.ID
	mountFill(t, h, mib)
	fillGuest(t, h, mib)
	sum := sh(t, h, "busybox md5sum /tmp/fill/data")
	mem := filepath.Join(r.sandboxDir(id), "mem")
	pauseResume := func(what string) *runtime.Handle {
		t.Helper()
		if err := r.Pause(ctx, id); err != nil {
			t.Fatalf("%s pause: %v", what, err)
		}
		if !isKept(r, id) {
			t.Fatalf("%s pause did not keep its QEMU", what)
		}
		t.Logf("%s pause wrote %d bytes", what, pauseWritten(r, id))
		waitTornDown(t, r, id)
		h2, err := r.Resume(ctx, id)
		if err != nil {
			t.Fatalf("%s resume: %v", what, err)
		}
		return h2
	}
	checkSum := func(what string, h *runtime.Handle) {
		t.Helper()
		if got := sh(t, h, "busybox md5sum /tmp/fill/data"); got != sum {
			t.Errorf("%s: /tmp/fill/data %q, before the pause %q", what, got, sum)
		}
	}

	// Hot: paused right after the guest wrote all of it.
	sh(t, h, "echo 0 > /tmp/fill/round")
	fillGuest(t, h, mib)
	h = pauseResume("hot")
	checkFill(t, h, 0)
	checkSum("hot", h)

	// Idle: the host wrote the memory file back first.
	sh(t, h, "echo 1 > /tmp/fill/round")
	if err := memfile.SyncFiles(mem); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // linkwatch: a pause within a second of the resume waits (docs/pause.md)
	h = pauseResume("idle")
	checkFill(t, h, 1)
	checkSum("idle", h)

	// Cold: the kept QEMU is let go, the resume starts a new one.
	time.Sleep(time.Second) // linkwatch, as above
	if err := r.Pause(ctx, id); err != nil {
		t.Fatalf("pause before the cold resume: %v", err)
	}
	r.releaseKept(ctx, id)
	if isKept(r, id) {
		t.Fatal("kept after releaseKept")
	}
	assertGoneWhilePaused(t, r, id)
	h2, err := r.Resume(ctx, id)
	if err != nil {
		t.Fatalf("cold resume: %v", err)
	}
	if h2.PID == h.PID {
		t.Errorf("cold resume in QEMU %d, the kept one's", h2.PID)
	}
	checkFill(t, h2, 1)
	checkSum("cold", h2)
	killAndCheck(t, r, h2)
}
