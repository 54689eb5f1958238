package vm

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/cgroups"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/guestinit"
	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/vm/freeze"
)

// counterLoop runs in the background of a guest and counts in /tmp/counter.
const counterLoop = "(i=0; while :; do i=$((i+1)); echo $i > /tmp/counter; sleep 0.2; done) </dev/null >/dev/null 2>&1 &"

// sh runs a shell command in the guest as root.
func sh(t *testing.T, h *runtime.Handle, cmd string) string {
	t.Helper()
	out, err := run(h, "root", 30*time.Second, "sh", "-c", cmd)
	if err != nil {
		t.Fatalf("%q: %v (output %q)", cmd, err, out)
	}
	return strings.TrimSpace(out)
}

// counter reads the guest's /tmp/counter. The loop rewrites it with
// `echo >`, so a read may land between the truncation and the write, or
// come before the loop's first write (a loaded host): an empty read, or
// none, is retried.
func counter(t *testing.T, h *runtime.Handle) int {
	t.Helper()
	for try := 0; ; try++ {
		out := sh(t, h, "cat /tmp/counter 2>/dev/null || true")
		if out == "" && try < 20 {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		n, err := strconv.Atoi(out)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// waitCounterAbove waits until the guest's counter exceeds n.
func waitCounterAbove(t *testing.T, h *runtime.Handle, n int) int {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c := counter(t, h)
		if c > n {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("counter stuck at %d (want > %d)", c, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkGuestClock fails when the guest's clock is more than 3 s off.
func checkGuestClock(t *testing.T, h *runtime.Handle) {
	t.Helper()
	gs, err := strconv.ParseInt(sh(t, h, "date +%s"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(time.Unix(gs, 0)); d.Abs() > 3*time.Second {
		t.Errorf("guest clock %s is %v off the host's", time.Unix(gs, 0).UTC(), d)
	}
}

// assertGoneWhilePaused checks that a paused sandbox has no QEMU, network
// namespace or cgroup, but its saved state.
func assertGoneWhilePaused(t *testing.T, r *Runtime, id string) {
	t.Helper()
	if pids := qemuPIDs(r.sandboxDir(id)); len(pids) > 0 { // Pause returns once QEMU is gone
		t.Errorf("paused sandbox has processes %v", pids)
	}
	waitTornDown(t, r, id)
	if _, err := os.Stat(filepath.Join("/run/netns", testScope+"-"+id)); err == nil {
		t.Error("paused sandbox kept its netns")
	}
	if !cgroupGone(r, id) {
		t.Error("paused sandbox kept its cgroup")
	}
	if _, err := os.Stat(r.statePath(id)); err != nil {
		t.Errorf("no saved state: %v", err)
	}
	if _, err := r.Wait(context.Background(), id); !errdefs.IsNotFound(err) {
		t.Errorf("Wait on a sandbox paused to disk = %v, want not found (no qemu)", err)
	}
	if st, err := r.Stats(context.Background(), id); err != nil || st.MemoryBytes != 0 || st.CPUUsageNs != 0 {
		t.Errorf("Stats of a paused sandbox = %+v, %v; want zero", st, err)
	}
}

// qemuPIDs lists processes with dir on their command line.
func qemuPIDs(dir string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		// A zombie's command line reads empty.
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), dir+"/") {
			out = append(out, pid)
		}
	}
	return out
}

func TestPauseResumeKeepsStateAndClock(t *testing.T) {
	r := testRuntime(t)
	ctx := context.Background()
	h, c := createCountingPaused(t, r)
	// A policy set right after the pause comes after its network teardown.
	if err := r.SetEgress(ctx, h.ID, netpolicy.Egress{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := r.boxes.Lookup(h.ID); b != nil {
		b.mu.Lock()
		pending := b.teardown != nil
		b.mu.Unlock()
		if pending {
			t.Error("SetEgress on a paused sandbox returned before its network teardown ran")
		}
	}
	assertGoneWhilePaused(t, r, h.ID)
	if err := r.Pause(ctx, h.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Pause of a paused sandbox: %v, want ErrFailedPrecondition", err)
	}
	if err := r.Snapshot(ctx, h.ID, "s"+newID()); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Snapshot of a paused sandbox: %v, want ErrFailedPrecondition", err)
	}
	time.Sleep(5 * time.Second) // the pause lasts 5 s: the guest's clock must catch up after it
	h2, err := r.Resume(ctx, h.ID)
	if err != nil {
		t.Fatal(err)
	}
	if h2.Paused || h2.PID == 0 || h2.PID == h.PID {
		t.Errorf("handle after resume %+v (before %+v)", h2, h)
	}
	checkGuestClock(t, h2)
	t.Logf("guest after a 5 s pause: %s", restoredLine(r, h.ID))
	if got := sh(t, h2, "cat /root/file /dev/shm/value"); got != "on-disk\nin-ram" {
		t.Errorf("files after resume: %q", got)
	}
	c2 := counter(t, h2)
	if c2 < c {
		t.Errorf("counter went back from %d to %d", c, c2)
	}
	c = waitCounterAbove(t, h2, c2) // the background process runs again
	if _, err := r.Resume(ctx, h.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Resume of a running sandbox: %v, want ErrFailedPrecondition", err)
	}
	for i := 2; i <= 5; i++ {
		if err := r.Pause(ctx, h.ID); err != nil {
			t.Fatalf("pause #%d: %v", i, err)
		}
		if h2, err = r.Resume(ctx, h.ID); err != nil {
			t.Fatalf("resume #%d: %v", i, err)
		}
		sh(t, h2, "echo "+strconv.Itoa(i)+" >> /dev/shm/value")
		c2 := counter(t, h2) // memory came back as the pause left it
		if c2 < c {
			t.Errorf("pause #%d: counter went back from %d to %d", i, c, c2)
		}
		c = waitCounterAbove(t, h2, c2)
	}
	if got := sh(t, h2, "cat /dev/shm/value"); got != "in-ram\n2\n3\n4\n5" {
		t.Errorf("/dev/shm/value after 5 pauses: %q", got)
	}
	// A paused sandbox is killed like a running one.
	if err := r.Pause(ctx, h.ID); err != nil {
		t.Fatal(err)
	}
	killAndCheck(t, r, h2)
	if _, err := r.Resume(ctx, h.ID); !errdefs.IsNotFound(err) {
		t.Errorf("Resume after Kill: %v, want ErrNotFound", err)
	}
}

func TestPauseErrors(t *testing.T) {
	r := testRuntime(t)
	ctx := context.Background()
	id := newID()
	if err := r.Pause(ctx, id); !errdefs.IsNotFound(err) {
		t.Errorf("Pause of an unknown sandbox: %v", err)
	}
	if _, err := r.Resume(ctx, id); !errdefs.IsNotFound(err) {
		t.Errorf("Resume of an unknown sandbox: %v", err)
	}
	if err := r.Snapshot(ctx, id, "s"+id); !errdefs.IsNotFound(err) {
		t.Errorf("Snapshot of an unknown sandbox: %v", err)
	}
	if err := r.Pause(ctx, "Bad-ID"); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Pause of a bad ID: %v", err)
	}
	if st, err := r.Stats(ctx, id); err == nil {
		t.Errorf("Stats of an unknown sandbox: %+v", st)
	}
}

// dropQMP closes r's QMP and console connections to id, as a crash of
// the server would (QEMU serves one client at a time on each).
func dropQMP(r *Runtime, id string) {
	if b, ok := r.boxes.Lookup(id); ok {
		b.mu.Lock()
		if b.qmp != nil {
			b.qmp.Close()
			b.qmp = nil
		}
		if b.proc != nil {
			b.proc.Con.Close()
			b.proc.Con = nil
		}
		b.mu.Unlock()
	}
}

// restarted is a new Runtime over r's data dir (and network scope), as
// after a server restart.
func restarted(t *testing.T, r *Runtime) *Runtime {
	t.Helper()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	r2, err := New(context.Background(), runtime.Config{DataDir: filepath.Dir(r.dir), Logger: log},
		WithAccel(r.o.accel), WithNetwork(r.net), WithInit(r.o.init), WithCgroupParent(r.o.cgroupParent), WithDiskFree(r.o.diskFreeMiB),
		WithNFSD(r.o.nfsd), WithPrelaunch(0), WithKeepPaused(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r2.Close() })
	return r2
}

func TestRecoverPaused(t *testing.T) {
	r := testRuntime(t)
	ctx := context.Background()
	h := create(t, r)
	sh(t, h, "echo kept > /root/file && echo kept-in-ram > /dev/shm/value")
	if err := r.Pause(ctx, h.ID); err != nil {
		t.Fatal(err)
	}
	// A server that restarts has finished its background teardown or
	// died: r's must not run into r2's resume.
	waitTornDown(t, r, h.ID)
	r2 := restarted(t, r)
	hs, err := r2.Recover(ctx, []string{h.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || hs[0].ID != h.ID || !hs[0].Paused || hs[0].PID != 0 {
		t.Fatalf("Recover = %+v, want %s paused", hs, h.ID)
	}
	if _, err := r2.Wait(ctx, h.ID); !errdefs.IsNotFound(err) {
		t.Errorf("Wait on a recovered paused sandbox = %v, want not found (no qemu)", err)
	}
	resumeInRestarted(t, r, r2, h.ID, "cat /root/file /dev/shm/value", "kept\nkept-in-ram")
}

// resumeInRestarted resumes id in r2 (a runtime started after r crashed),
// checks that cmd prints want, kills it there and drops r's bookkeeping.
func resumeInRestarted(t *testing.T, r, r2 *Runtime, id, cmd, want string) {
	t.Helper()
	ctx := context.Background()
	h2, err := r2.Resume(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got := sh(t, h2, cmd); got != want {
		t.Errorf("%s after resume in a new runtime: %q, want %q", cmd, got, want)
	}
	killAndCheck(t, r2, h2)
	_ = r.Kill(ctx, id)
}

// TestRecoverCrashWindows plays a server crash at the two points of a
// pause that matter: after the state file was committed (QEMU still runs),
// and before (QEMU stopped, only state.tmp written).
func TestRecoverCrashWindows(t *testing.T) {
	r := testRuntime(t)
	ctx := context.Background()
	committed, uncommitted := create(t, r), create(t, r)
	for _, h := range []*runtime.Handle{committed, uncommitted} {
		sh(t, h, "echo "+h.ID+" > /dev/shm/value")
	}
	b, _ := r.boxes.Lookup(committed.ID)
	if err := freeze.Save(ctx, b.qmp, b.proc.Con, r.sandboxDir(committed.ID), time.Minute, &freeze.Times{}); err != nil {
		t.Fatal(err)
	}
	dir := r.sandboxDir(uncommitted.ID)
	b, _ = r.boxes.Lookup(uncommitted.ID)
	if err := freeze.Freeze(ctx, b.qmp, b.proc.Con, filepath.Join(dir, "state.tmp"), time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	dropQMP(r, committed.ID)
	dropQMP(r, uncommitted.ID)
	stray := filepath.Join(r.dir, "snapshots", "s"+newID()+".tmp")
	if err := os.MkdirAll(stray, 0o700); err != nil {
		t.Fatal(err)
	}

	r2 := restarted(t, r)
	hs, err := r2.Recover(ctx, []string{committed.ID, uncommitted.ID})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*runtime.Handle{}
	for _, h := range hs {
		got[h.ID] = h
	}
	if h := got[committed.ID]; h == nil || !h.Paused {
		t.Errorf("committed pause recovered as %+v, want paused", h)
	} else {
		assertGoneWhilePaused(t, r2, committed.ID)
	}
	if h := got[uncommitted.ID]; h == nil || h.Paused || h.PID != uncommitted.PID {
		t.Errorf("uncommitted pause recovered as %+v, want running with PID %d", h, uncommitted.PID)
	}
	if _, err := os.Stat(filepath.Join(dir, "state.tmp")); err == nil {
		t.Error("state.tmp survived Recover")
	}
	if _, err := os.Stat(stray); err == nil {
		t.Error("unfinished snapshot survived Recover")
	}
	// The continued guest runs with its link up and its memory intact.
	if out := sh(t, uncommitted, "cat /dev/shm/value"); out != uncommitted.ID {
		t.Errorf("continued guest: %q", out)
	}
	h, err := r2.Resume(ctx, committed.ID)
	if err != nil {
		t.Fatal(err)
	}
	if out := sh(t, h, "cat /dev/shm/value"); out != committed.ID {
		t.Errorf("resumed guest: %q", out)
	}
	killAndCheck(t, r2, h)
	killAndCheck(t, r2, uncommitted)
	for _, id := range []string{committed.ID, uncommitted.ID} {
		_ = r.Kill(ctx, id)
	}
}

// cgroupGone reports whether id's cgroup no longer exists.
func cgroupGone(r *Runtime, id string) bool {
	for _, d := range cgroups.Dirs(r.cgroupPath(id)) {
		if _, err := os.Stat(d); err == nil {
			return false
		}
	}
	return true
}

// restoredLine is the guest's last restore marker line (what it renewed).
func restoredLine(r *Runtime, id string) string {
	b, _ := os.ReadFile(filepath.Join(r.sandboxDir(id), "console.log"))
	lines := strings.Split(string(b), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], guestinit.RestoredMarker) {
			return strings.TrimSpace(lines[i])
		}
	}
	return "(no restore marker)"
}

// waitTornDown waits until what Pause leaves to release in the background
// (network, cgroup) is released.
func waitTornDown(t testing.TB, r *Runtime, id string) {
	t.Helper()
	b, ok := r.boxes.Lookup(id)
	if !ok {
		return
	}
	b.mu.Lock()
	ch := b.tornDown
	b.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("sandbox %s: the paused sandbox's teardown did not run", id)
	}
}

// createCountingPaused creates a sandbox with a file on disk, one in
// /dev/shm and a running counter, and pauses it; c is a counter value
// read before the pause.
func createCountingPaused(t *testing.T, r *Runtime) (*runtime.Handle, int) {
	t.Helper()
	h := create(t, r)
	sh(t, h, "echo on-disk > /root/file && echo in-ram > /dev/shm/value && "+counterLoop)
	c := waitCounterAbove(t, h, 1)
	if err := r.Pause(context.Background(), h.ID); err != nil {
		t.Fatal(err)
	}
	return h, c
}

// TestRecoverWaitsForTeardown: a Recover on the runtime that just paused a
// sandbox waits for the pause's background teardown; run into it, the
// network's Recover read a veth that was half deleted ("has no address").
func TestRecoverWaitsForTeardown(t *testing.T) {
	r := testRuntime(t)
	ctx := context.Background()
	h := create(t, r)
	r.testHookTeardown = func() { time.Sleep(time.Second) }
	t.Cleanup(func() { r.testHookTeardown = nil })
	if err := r.PauseFilesystem(ctx, h.ID); err != nil {
		t.Fatal(err)
	}
	hs, err := r.Recover(ctx, []string{h.ID})
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	if len(hs) != 1 || !hs[0].Paused {
		t.Fatalf("Recover = %+v, want %s paused", hs, h.ID)
	}
	b, _ := r.boxes.Lookup(h.ID)
	b.mu.Lock()
	pending := b.teardown != nil
	b.mu.Unlock()
	if pending {
		t.Error("Recover returned while the pause's background teardown had not run")
	}
}
