package hostfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/bench/benchpair"
	"github.com/moatsh/moat/internal/mountinfo"
	"github.com/moatsh/moat/internal/testkit"
)

// TestRemoveDirFailsClosed: when it cannot be told whether a mount point
// is mounted, RemoveDir removes nothing (a template or a volume may still
// be mounted inside); when one is, it refuses; with nothing mounted it
// removes the directory.
func TestRemoveDirFailsClosed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sandbox")
	if err := os.MkdirAll(filepath.Join(dir, "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	real := mounted
	t.Cleanup(func() { mounted = real })
	mounted = func(string, func() ([]string, error)) (bool, error) { return false, errors.New("no statx") }
	if err := RemoveDir(dir); err == nil {
		t.Fatal("RemoveDir went ahead without knowing what is mounted")
	}
	if _, err := os.Stat(filepath.Join(dir, "rootfs")); err != nil {
		t.Fatalf("the directory was touched: %v", err)
	}
	mounted = func(p string, _ func() ([]string, error)) (bool, error) {
		return p == filepath.Join(dir, "rootfs"), nil
	}
	if err := RemoveDir(dir); err == nil {
		t.Fatal("RemoveDir went ahead with rootfs mounted")
	}
	// Where statx cannot tell, the mount table is read once per removal,
	// not once per mount point.
	reads, realTable := 0, mountTable
	t.Cleanup(func() { mountTable = realTable })
	mountTable = func() ([]string, error) { reads++; return nil, nil }
	mounted = func(p string, table func() ([]string, error)) (bool, error) { return inMountTable(p, table) }
	if err := RemoveDir(filepath.Join(t.TempDir(), "other")); err != nil {
		t.Fatal(err)
	}
	if reads != 1 {
		t.Fatalf("the mount table was read %d times for one removal", reads)
	}
	mounted = real
	if err := RemoveDir(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("directory left: %v", err)
	}
}

// TestMountedAgreesWithTable: for real mount points (a tmpfs, a directory
// bound onto itself, a mount under a mount) and for what is none (a plain
// directory, a missing path, a symlink to a mount point, a file), the
// statx answer is the mount table's.
func TestMountedAgreesWithTable(t *testing.T) {
	testkit.RequireRoot(t)
	root := t.TempDir()
	mk := func(name string) string {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tmpfs, bound, plain := mk("tmpfs"), mk("bound"), mk("plain")
	mountT(t, "tmpfs", tmpfs, "tmpfs", 0)
	mountT(t, bound, bound, "", unix.MS_BIND)
	inner := filepath.Join(tmpfs, "inner")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	mountT(t, "tmpfs", inner, "tmpfs", 0)
	link := filepath.Join(root, "link")
	if err := os.Symlink(tmpfs, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(plain, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		want bool
	}{
		{tmpfs, true}, {bound, true}, {inner, true},
		{plain, false}, {filepath.Join(root, "missing"), false}, {link, false}, {file, false},
	} {
		got, err := mounted(c.path, mountinfo.Points)
		if err != nil {
			t.Fatalf("%s: %v", c.path, err)
		}
		table, err := inMountTable(c.path, mountinfo.Points)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want || table != c.want {
			t.Errorf("%s: statx says mounted=%v, the mount table %v, want %v", c.path, got, table, c.want)
		}
	}
}

// mountT mounts and unmounts at the test's end (lazily, innermost first).
func mountT(t testing.TB, src, target, fstype string, flags uintptr) {
	t.Helper()
	if err := unix.Mount(src, target, fstype, flags, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
}

// BenchmarkMountedCheck: one kill's checks of its sandbox's five mount
// points on a host with 1,000 other mounts (about 250 sandboxes), by statx
// against the mount table read once (the code before).
func BenchmarkMountedCheck(b *testing.B) {
	testkit.RequireRoot(b)
	root := b.TempDir()
	for i := range 1000 {
		p := filepath.Join(root, fmt.Sprint(i))
		if err := os.Mkdir(p, 0o755); err != nil {
			b.Fatal(err)
		}
		mountT(b, "tmpfs", p, "tmpfs", 0)
	}
	dir := filepath.Join(root, "0")
	check := func(f func(string) (bool, error)) func() time.Duration {
		return func() time.Duration {
			start := time.Now()
			for _, m := range mounts {
				if _, err := f(filepath.Join(dir, m)); err != nil {
					b.Fatal(err)
				}
			}
			return time.Since(start)
		}
	}
	table := func(p string) (bool, error) { return inMountTable(p, mountinfo.Points) }
	once := func() time.Duration { return check(table)() / time.Duration(len(mounts)) }
	benchpair.Compare(b, "a kill's mount point checks among 1,000 mounts",
		benchpair.Way{Name: "statx", Run: check(func(p string) (bool, error) { return mounted(p, mountinfo.Points) })}, benchpair.Way{Name: "table", Run: once})
}
