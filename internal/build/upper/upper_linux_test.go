package upper

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/testkit"
)

// TestApplyUpper writes an overlay upper dir as the kernel leaves it
// (owners in the sandbox's host range, whiteouts, an opaque dir, a hard
// link, a symlink planted to lead out) into a lower tree.
func TestApplyUpper(t *testing.T) {
	testkit.RequireRoot(t) // whiteouts are device nodes, opaque dirs trusted xattrs
	const host = 200000
	dir := t.TempDir()
	lower, upper, outside := filepath.Join(dir, "lower"), filepath.Join(dir, "upper"), filepath.Join(dir, "outside")
	for _, d := range []string{lower, upper, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(root, rel, body string, mode os.FileMode, uid int) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	// The lower layer (the rootfs being built).
	write(lower, "etc/keep", "keep", 0o644, 0)
	write(lower, "etc/gone", "gone", 0o644, 0)
	write(lower, "etc/hosts", "template hosts", 0o644, 0)
	write(lower, "opt/old/a", "a", 0o644, 0)
	write(lower, "home/user/f", "old", 0o644, 1000)
	if err := os.Symlink("../outside", filepath.Join(lower, "escape")); err != nil {
		t.Fatal(err)
	}
	// The upper layer.
	write(upper, "home/user/f", "new", 0o640, host+1000)
	write(upper, "usr/bin/tool", "#!/bin/sh", os.ModeSetuid|0o755, host)
	write(upper, "etc/hosts", "sandbox hosts", 0o644, host)
	write(upper, "escape/pwned", "x", 0o644, host) // escape is a dir in upper
	write(upper, "tmp/big", "y", 0o644, 7)         // an ID outside the range
	if err := os.Link(filepath.Join(upper, "home/user/f"), filepath.Join(upper, "home/user/g")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(upper, "etc/gone"), unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(upper, "opt/old"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(filepath.Join(upper, "opt/old"), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		t.Skipf("by design: the temp dir's filesystem lacks trusted xattrs: %v", err)
	}
	write(upper, "opt/old/b", "b", 0o644, host)
	if err := os.Symlink("/etc/keep", filepath.Join(upper, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(filepath.Join(upper, "link"), host+1000, host+1000); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(upper, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(upper, "usr/bin/tool"), mtime, mtime); err != nil {
		t.Fatal(err)
	}

	var skipped []string
	err := Apply(upper, lower, IDShift{Host: host, Size: 65536}, func(rel string) { skipped = append(skipped, rel) })
	// "escape" is a symlink to outside in lower and a dir in upper: the
	// dir replaces the link; nothing is written outside.
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(outside, "pwned")); !os.IsNotExist(err) {
		t.Fatalf("wrote through a symlink: %v", err)
	}
	read := func(rel string) string {
		b, _ := os.ReadFile(filepath.Join(lower, rel))
		return string(b)
	}
	owner := func(rel string) (int, os.FileMode) {
		fi, err := os.Lstat(filepath.Join(lower, rel))
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		return int(fi.Sys().(*syscall.Stat_t).Uid), fi.Mode()
	}
	checks := []struct {
		rel, body string
		uid       int
		mode      os.FileMode
	}{
		{"home/user/f", "new", 1000, 0o640},
		{"home/user/g", "new", 1000, 0o640},
		{"usr/bin/tool", "#!/bin/sh", 0, os.ModeSetuid | 0o755},
		{"etc/keep", "keep", 0, 0o644},
		{"etc/hosts", "template hosts", 0, 0o644},
		{"escape/pwned", "x", 0, 0o644},
		{"opt/old/b", "b", 0, 0o644},
		{"tmp/big", "y", overflowID, 0o644},
	}
	for _, c := range checks {
		if got := read(c.rel); got != c.body {
			t.Errorf("%s = %q, want %q", c.rel, got, c.body)
		}
		if uid, mode := owner(c.rel); uid != c.uid || mode != c.mode {
			t.Errorf("%s: uid %d mode %v, want %d %v", c.rel, uid, mode, c.uid, c.mode)
		}
	}
	for _, gone := range []string{"etc/gone", "opt/old/a", "fifo"} {
		if _, err := os.Lstat(filepath.Join(lower, gone)); !os.IsNotExist(err) {
			t.Errorf("%s still there: %v", gone, err)
		}
	}
	if target, err := os.Readlink(filepath.Join(lower, "link")); err != nil || target != "/etc/keep" {
		t.Errorf("link = %q, %v", target, err)
	}
	if uid, _ := owner("link"); uid != 1000 {
		t.Errorf("link owner %d", uid)
	}
	var a, b syscall.Stat_t
	_ = syscall.Stat(filepath.Join(lower, "home/user/f"), &a)
	_ = syscall.Stat(filepath.Join(lower, "home/user/g"), &b)
	if a.Ino != b.Ino {
		t.Error("hard link not kept")
	}
	if fi, _ := os.Stat(filepath.Join(lower, "usr/bin/tool")); !fi.ModTime().Equal(mtime) {
		t.Errorf("mtime %v", fi.ModTime())
	}
	if len(skipped) != 1 || skipped[0] != "fifo" {
		t.Errorf("skipped = %v", skipped)
	}
}
