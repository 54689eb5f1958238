package idmap

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/testkit"
)

// TestMount needs root: files under the mount appear shifted into the range,
// it is read-only, and the source keeps its owners.
func TestMount(t *testing.T) {
	testkit.RequireRoot(t)
	src, dst := t.TempDir(), t.TempDir()
	f := filepath.Join(src, "file")
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(f, 1000, 1001); err != nil {
		t.Fatal(err)
	}
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

// BenchmarkUserNS is the user namespace holder alone.
func BenchmarkUserNS(b *testing.B) {
	testkit.RequireRoot(b)
	for b.Loop() {
		fd, err := userNS(Range{Host: FirstHost})
		if err != nil {
			b.Fatal(err)
		}
		unix.Close(fd)
	}
}
