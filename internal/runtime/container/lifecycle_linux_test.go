package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/cgroups"
	"github.com/moatsh/moat/internal/hostfs"
	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/runtime"
)

func TestLifecycle(t *testing.T) {
	requireRuntime(t)
	for _, oci := range ociRuntimes(t) {
		t.Run(oci, func(t *testing.T) {
			r := newTestRuntime(t, oci)
			ctx := context.Background()
			start := time.Now()
			h := create(t, r, runtime.Spec{MemoryMiB: 128, Pids: 32, VCPUs: 1, TemplateID: "test"})
			code, _, err := get(h, "health", nil, 2*time.Second)
			if err != nil || code != 204 {
				t.Fatalf("health: %d, %v", code, err)
			}
			t.Logf("%s: create → health 204 in %v", oci, time.Since(start))
			if h.PID == 0 || h.Runtime != Name {
				t.Errorf("handle = %+v", h)
			}

			cg := filepath.Join(cgroups.Root, "memory", testCgroups, h.ID)
			checks := map[string]string{
				filepath.Join(cg, "memory.limit_in_bytes"):                                fmt.Sprint(128 << 20),
				filepath.Join(cgroups.Root, "pids", testCgroups, h.ID, "pids.max"):        "32",
				filepath.Join(cgroups.Root, "cpu", testCgroups, h.ID, "cpu.cfs_quota_us"): "100000",
			}
			for p, want := range checks {
				if got := readFile(t, p); got != want {
					t.Errorf("%s = %s, want %s", p, got, want)
				}
			}
			st, err := r.Stats(ctx, h.ID)
			if err != nil || st.MemoryLimit != 128<<20 || st.Pids < 1 || st.MemoryBytes == 0 {
				t.Errorf("stats = %+v, %v", st, err)
			}

			// The pids limit holds: 40 background sleeps cannot all fork. The
			// shell joins the sandbox's pids cgroup from the host: runc 1.1
			// cannot exec into a user namespace that does not own the netns.
			procs := filepath.Join(cgroups.Root, "pids", testCgroups, h.ID, "cgroup.procs")
			out, _ := exec.Command("sh", "-c", "echo $$ > "+procs+" && for i in $(seq 1 40); do sleep 2 & done; echo spawned").CombinedOutput()
			if !strings.Contains(string(out), "fork") {
				t.Errorf("40 processes under pids.max=32 all started: %q", out)
			}
			if st, _ := cgroups.ReadStats(testCgroups + "/" + h.ID); st.Pids > 32 {
				t.Errorf("pids.current = %d > 32", st.Pids)
			}

			if err := r.Pause(ctx, h.ID); err != nil {
				t.Fatal(err)
			}
			if _, _, err := get(h, "health", nil, 300*time.Millisecond); err == nil {
				t.Error("paused sandbox answered")
			}
			if !running(r, h.ID) {
				t.Error("paused sandbox's init is gone")
			}
			h2, err := r.Resume(ctx, h.ID)
			if err != nil {
				t.Fatal(err)
			}
			if h2.Addr != h.Addr || h2.PID != h.PID || h2.Paused {
				t.Errorf("resume changed the handle: %+v → %+v", h, h2)
			}
			if code, _, err := get(h, "health", nil, 2*time.Second); err != nil || code != 204 {
				t.Fatalf("health after resume: %d, %v", code, err)
			}

			killAndCheck(t, r, h)
			if running(r, h.ID) {
				t.Error("running after kill")
			}
			if err := r.Pause(ctx, h.ID); err == nil {
				t.Error("pause after kill succeeded")
			}
		})
	}
}

// killAndCheck kills h twice and checks that no host object named after it remains.
func killAndCheck(t *testing.T, r *Runtime, h *runtime.Handle) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if err := r.Kill(ctx, h.ID); err != nil {
			t.Fatalf("kill #%d: %v", i+1, err)
		}
	}
	assertGone(t, r, h.ID, h.PID)
}

func assertGone(t *testing.T, r *Runtime, id string, pid int) {
	t.Helper()
	if pid > 0 {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(cmd), "envd") {
				t.Errorf("envd pid %d still running", pid)
			}
		}
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), id) {
		t.Errorf("mount of %s left in mountinfo", id)
	}
	if _, err := os.Stat("/run/netns/" + testScope + "-" + id); !os.IsNotExist(err) {
		t.Errorf("netns of %s left (%v)", id, err)
	}
	// The disk's loop device detaches itself (autoclear) once the last
	// reference to its file system goes, which can trail the lazy unmount
	// of a kill by a moment on a busy host: it must go, not at once.
	loops := loopsOf(id)
	for deadline := time.Now().Add(5 * time.Second); len(loops) > 0 && time.Now().Before(deadline); loops = loopsOf(id) {
		time.Sleep(50 * time.Millisecond)
	}
	if len(loops) > 0 {
		t.Errorf("loop devices of %s left: %v", id, loops)
	}
	if _, err := netlink.LinkByName("tc" + id[:12]); err == nil {
		t.Errorf("veth of %s left", id)
	}
	if m, _ := filepath.Glob(filepath.Join(cgroups.Root, "*", testCgroups, id)); len(m) > 0 {
		t.Errorf("cgroups left: %v", m)
	}
	if _, err := os.Stat(r.dir(id)); !os.IsNotExist(err) {
		t.Errorf("sandbox dir left (%v)", err)
	}
	if _, err := r.oci.State(context.Background(), r.containerName(id)); err == nil {
		t.Errorf("container %s still known to %s", id, r.oci.Name)
	}
}

func TestRecover(t *testing.T) {
	r1 := newTestRuntime(t, "")
	ctx := context.Background()
	keep := create(t, r1, runtime.Spec{})
	frozen := create(t, r1, runtime.Spec{})
	if err := r1.Pause(ctx, frozen.ID); err != nil {
		t.Fatal(err)
	}
	orphan := create(t, r1, runtime.Spec{})
	// A leftover directory with a mounted overlay and no container.
	stray := newID()
	dir := r1.dir(stray)
	for _, d := range []string{"disk/upper", "disk/work", "lower", "rootfs", "sys"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := hostfs.MountRootfs(testRootfs, dir, idmap.Range{Host: idmap.FirstHost}); err != nil {
		t.Fatal(err)
	}

	// A restarted server: a fresh Runtime over the same state.
	r2, err := New(ctx, runtime.Config{DataDir: r1.dataDir, Logger: r1.log},
		WithOCIRuntime(r1.oci.Name), WithStateRoot(r1.oci.Root), WithCgroupParent(testCgroups), WithNetwork(r1.net))
	if err != nil {
		t.Fatal(err)
	}
	hs, err := r2.Recover(ctx, []string{keep.ID, frozen.ID, stray})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*runtime.Handle{}
	for _, h := range hs {
		got[h.ID] = h
	}
	if h := got[keep.ID]; len(hs) != 2 || h == nil || h.Addr != keep.Addr || h.PID != keep.PID || h.Paused {
		t.Fatalf("recovered %+v, want %+v running", hs, keep)
	}
	if h := got[frozen.ID]; h == nil || !h.Paused {
		t.Fatalf("paused sandbox recovered as %+v", h)
	}
	if _, err := r2.Resume(ctx, frozen.ID); err != nil {
		t.Fatalf("resume after recover: %v", err)
	}
	if code, _, err := get(frozen, "health", nil, 2*time.Second); err != nil || code != 204 {
		t.Fatalf("resumed sandbox: %d, %v", code, err)
	}
	killAndCheck(t, r2, frozen)
	assertGone(t, r2, orphan.ID, orphan.PID)
	assertGone(t, r2, stray, 0)
	if code, _, err := get(keep, "health", nil, 2*time.Second); err != nil || code != 204 {
		t.Fatalf("adopted sandbox: %d, %v", code, err)
	}
	killAndCheck(t, r2, keep)
}

// benchDiskMiB is the benchmark's disk quota: the API's default
// (MOAT_BENCH_DISK_MIB=0 measures without one).
var benchDiskMiB = func() int {
	if v, err := strconv.Atoi(os.Getenv("MOAT_BENCH_DISK_MIB")); err == nil {
		return v
	}
	return 2048
}()

// BenchmarkCreateToHealth measures Create (which waits for envd's port) plus
// the first GET /health; Kill is outside the timer.
func BenchmarkCreateToHealth(b *testing.B) {
	r := newTestRuntime(b, "")
	ctx := context.Background()
	var ds []time.Duration
	for i := 0; i < b.N; i++ {
		id := newID()
		start := time.Now()
		h, err := r.Create(ctx, runtime.Spec{ID: id, RootfsDir: testRootfs, MemoryMiB: 256, Pids: 256, VCPUs: 1, DiskMiB: benchDiskMiB})
		if err != nil {
			b.Fatal(err)
		}
		if code, _, err := get(h, "health", nil, 2*time.Second); err != nil || code != 204 {
			b.Fatalf("health: %d, %v", code, err)
		}
		ds = append(ds, time.Since(start))
		b.StopTimer()
		if err := r.Kill(ctx, id); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	reportMedian(b, ds)
}

// BenchmarkBareRuncTrue is the baseline: a bare `runc run` of /bin/true.
func BenchmarkBareRuncTrue(b *testing.B) {
	requireRuntime(b)
	var ds []time.Duration
	for i := 0; i < b.N; i++ {
		d, err := BareRun(context.Background(), "", testRootfs, "/bin/true")
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, d)
	}
	reportMedian(b, ds)
}

func reportMedian(b *testing.B, ds []time.Duration) {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "median-ms")
}

func TestKillPausedAndConcurrent(t *testing.T) {
	r := newTestRuntime(t, "")
	ctx := context.Background()
	const n = 4
	hs := make([]*runtime.Handle, n)
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			h, err := r.Create(ctx, runtime.Spec{ID: newID(), RootfsDir: testRootfs, AllowInternet: i%2 == 0, MemoryMiB: 64})
			hs[i] = h
			errs <- err
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	seen := map[string]bool{}
	for _, h := range hs {
		if h == nil {
			continue
		}
		t.Cleanup(func() { _ = r.Kill(ctx, h.ID) })
		if seen[h.Addr.String()] {
			t.Errorf("address %s handed out twice", h.Addr)
		}
		seen[h.Addr.String()] = true
		if code, _, err := get(h, "health", nil, 2*time.Second); err != nil || code != 204 {
			t.Errorf("%s health: %d %v", h.ID, code, err)
		}
	}
	if t.Failed() {
		return
	}
	if err := r.Pause(ctx, hs[0].ID); err != nil {
		t.Fatal(err)
	}
	// Concurrent kills, one of them of a paused sandbox, each ID twice.
	done := make(chan error, 2*n)
	for _, h := range hs {
		for j := 0; j < 2; j++ {
			go func() { done <- r.Kill(ctx, h.ID) }()
		}
	}
	for i := 0; i < 2*n; i++ {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	for _, h := range hs {
		assertGone(t, r, h.ID, h.PID)
	}
}

// loopsOf lists loop devices whose backing file's path contains id.
func loopsOf(id string) []string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), id) {
			out = append(out, f)
		}
	}
	return out
}

// TestDiskQuota: a sandbox with DiskMiB writes until its own filesystem is
// full (ENOSPC at the quota, the host's disk untouched), gets the space back
// by deleting, and its loop device and image go with Kill.
func TestDiskQuota(t *testing.T) {
	r := newTestRuntime(t, "")
	h := create(t, r, runtime.Spec{DiskMiB: 32})
	if len(loopsOf(h.ID)) != 1 {
		t.Fatalf("loop devices of the sandbox: %v", loopsOf(h.ID))
	}
	st0, err := r.Stats(context.Background(), h.ID)
	if err != nil || st0.DiskTotal > 32<<20 || st0.DiskTotal < 24<<20 {
		t.Fatalf("stats of a 32 MiB disk: %+v %v", st0, err)
	}
	if out, err := execIn(r, h.ID, "sh", "-c", "dd if=/dev/zero of=/eight bs=1M count=8 conv=fsync"); err != nil {
		t.Fatalf("dd: %v %s", err, out)
	}
	if st, _ := r.Stats(context.Background(), h.ID); st.DiskUsed < st0.DiskUsed+8<<20 {
		t.Errorf("disk used %d after writing 8 MiB, %d before", st.DiskUsed, st0.DiskUsed)
	}
	out, err := execIn(r, h.ID, "sh", "-c", "dd if=/dev/zero of=/big bs=1M count=64 2>&1; df -k / | tail -1")
	if err == nil && !strings.Contains(out, "No space left") {
		t.Fatalf("64 MiB fit in a 32 MiB quota: %s", out)
	}
	if !strings.Contains(out, "No space left") {
		t.Fatalf("dd: %v %s", err, out)
	}
	// What the sandbox took of the host's disk is its image's allocated
	// blocks (the host's free space would count every other writer too:
	// go test runs packages at once).
	var img unix.Stat_t
	if err := unix.Stat(filepath.Join(r.dir(h.ID), "disk.img"), &img); err != nil {
		t.Fatal(err)
	}
	if used := img.Blocks * 512; used > 48<<20 {
		t.Errorf("the sandbox took %d MiB of the host's disk", used>>20)
	}
	if out, err := execIn(r, h.ID, "sh", "-c", "rm /big && echo again > /small && cat /small"); err != nil || !strings.Contains(out, "again") {
		t.Fatalf("after deleting: %v %s", err, out)
	}
	// The image is sparse: it costs what was written, not its size.
	fi, err := os.Stat(filepath.Join(r.dir(h.ID), "disk.img"))
	if err != nil || fi.Size() != 32<<20 {
		t.Fatalf("disk.img: %v %v", fi, err)
	}
	killAndCheck(t, r, h)
}

// running reports whether id's init runs (also frozen): a Wait is still
// blocked after a moment.
func running(r *Runtime, id string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := r.Wait(ctx, id)
	return errors.Is(err, context.DeadlineExceeded)
}
