package idmap

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/bench"
	"github.com/moatsh/moat/internal/testkit"
)

// TestMount needs root: files under the mount appear shifted into the range,
// it is read-only, and the source keeps its owners.
func TestMount(t *testing.T) {
	testkit.RequireRoot(t)
	src, dst := t.TempDir(), t.TempDir()
	f := ownedFile(t, src)
	r := Range{Host: FirstHost + 7*Size}
	if err := Mount(src, dst, r); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dst, unix.MNT_DETACH) })
	owner := func(p string) (uint32, uint32) {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		return st.Uid, st.Gid
	}
	if uid, gid := owner(filepath.Join(dst, "file")); uid != r.Host+1000 || gid != r.Host+1001 {
		t.Fatalf("through the mount: %d:%d, want %d:%d", uid, gid, r.Host+1000, r.Host+1001)
	}
	if uid, gid := owner(dst); uid != r.Host || gid != r.Host {
		t.Fatalf("mount root: %d:%d, want %d", uid, gid, r.Host)
	}
	if uid, gid := owner(f); uid != 1000 || gid != 1001 {
		t.Fatalf("source changed: %d:%d", uid, gid)
	}
	if err := os.WriteFile(filepath.Join(dst, "new"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Fatalf("write through the mount: %v, want EROFS", err)
	}
	if err := Mount(filepath.Join(src, "missing"), t.TempDir(), r); err == nil {
		t.Fatal("mount of a missing source succeeded")
	}
}

// ownedFile writes dir/file owned by 1000:1001 and returns its path.
func ownedFile(t *testing.T, dir string) string {
	t.Helper()
	f := filepath.Join(dir, "file")
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(f, 1000, 1001); err != nil {
		t.Fatal(err)
	}
	return f
}

// BenchmarkMount is the cost an idmapped template view adds to a create
// (user namespace holder, open_tree, mount_setattr, move_mount) plus unmount.
func BenchmarkMount(b *testing.B) {
	testkit.RequireRoot(b)
	src, dst := b.TempDir(), b.TempDir()
	r := Range{Host: FirstHost}
	for b.Loop() {
		if err := Mount(src, dst, r); err != nil {
			b.Fatal(err)
		}
		if err := unix.Unmount(dst, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// userNSWays are the two ways of making a range's user namespace.
var userNSWays = []struct {
	name string
	make func(Range) (int, error)
}{{"unshare", userNSUnshare}, {"fork", userNSFork}}

// TestUserNSWays: a namespace made either way maps the range: files owned
// by 1000:1001 appear as Host+1000:Host+1001 through a mount idmapped
// with it.
func TestUserNSWays(t *testing.T) {
	testkit.RequireRoot(t)
	testkit.RequireTool(t, "unshare")
	for i, w := range userNSWays {
		t.Run(w.name, func(t *testing.T) {
			src, dst := t.TempDir(), t.TempDir()
			ownedFile(t, src)
			r := Range{Host: FirstHost + uint32(20+i)*Size}
			fd, err := w.make(r)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			if err := mountNS(src, dst, fd); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = unix.Unmount(dst, unix.MNT_DETACH) })
			fi, err := os.Stat(filepath.Join(dst, "file"))
			if err != nil {
				t.Fatal(err)
			}
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != r.Host+1000 || st.Gid != r.Host+1001 {
				t.Fatalf("through the mount: %d:%d, want %d:%d", st.Uid, st.Gid, r.Host+1000, r.Host+1001)
			}
		})
	}
}

// BenchmarkUserNS makes a user namespace each way in turn, from a process
// holding 256 MiB of written heap as a server does, and reports the
// medians of each way's wall time and CPU time (this process's and its
// children's) and their ratios.
func BenchmarkUserNS(b *testing.B) {
	testkit.RequireRoot(b)
	heap := make([]byte, 256<<20)
	for i := range heap {
		heap[i] = byte(i)
	}
	var wall, cpu [2]bench.Series
	for b.Loop() {
		for i, w := range userNSWays {
			before, start := cpuTime(b), time.Now()
			fd, err := w.make(Range{Host: FirstHost + uint32(30+i)*Size})
			if err != nil {
				b.Fatal(err)
			}
			for j := 0; j < len(heap); j += 4096 { // the writes a server goes on with
				heap[j]++
			}
			wall[i].Samples = append(wall[i].Samples, time.Since(start))
			cpu[i].Samples = append(cpu[i].Samples, cpuTime(b)-before)
			unix.Close(fd)
		}
	}
	ms := func(s bench.Series) float64 { return s.Median().Seconds() * 1000 }
	wu, wf, cu, cf := ms(wall[0]), ms(wall[1]), ms(cpu[0]), ms(cpu[1])
	b.ReportMetric(cu, "unshare-cpu-ms/op")
	b.ReportMetric(cf, "fork-cpu-ms/op")
	b.Logf("user namespace: unshare %.2f ms wall, %.2f ms CPU; fork %.2f ms wall, %.2f ms CPU; ratios %.2f, %.2f (medians of %d)",
		wu, cu, wf, cf, wu/wf, cu/cf, len(wall[0].Samples))
}

// cpuTime is the CPU time of this process and its waited-for children.
func cpuTime(b *testing.B) time.Duration {
	var self, kids unix.Rusage
	if err := errors.Join(unix.Getrusage(unix.RUSAGE_SELF, &self), unix.Getrusage(unix.RUSAGE_CHILDREN, &kids)); err != nil {
		b.Fatal(err)
	}
	d := func(t unix.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return d(self.Utime) + d(self.Stime) + d(kids.Utime) + d(kids.Stime)
}

// TestWaitUnsharedExited: a process that ends before it is in a namespace
// of its own (killed, or refused one) ends the wait at once; its zombie
// still shows the parent's namespace, which the wait must not take for
// "not yet" until its deadline.
func TestWaitUnsharedExited(t *testing.T) {
	self, err := os.Readlink("/proc/self/ns/user")
	if err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	close(exited)
	start := time.Now()
	if err := waitUnshared("/proc/self", self, exited); !errors.Is(err, errExited) {
		t.Fatalf("got %v, want errExited", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("returned after %v, at its deadline", d)
	}
}
