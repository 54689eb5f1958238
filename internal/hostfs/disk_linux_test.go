package hostfs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/mountinfo"
	"github.com/moatsh/moat/internal/testkit"
)

// loopOf returns the loop device mounted on target (its /sys/block name).
func loopOf(t *testing.T, target string) string {
	t.Helper()
	ms, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.MountPoint == target {
			return strings.TrimPrefix(m.Source, "/dev/")
		}
	}
	t.Fatalf("nothing mounted on %s", target)
	return ""
}

func dio(t *testing.T, loop string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/block", loop, "loop/dio"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// A sandbox disk's loop device runs buffered while the create goes on
// and switches to direct I/O dioDelay after its mount; directIO leaves
// alone a device that no longer holds the image it was asked for.
func TestDiskDirectIOLater(t *testing.T) {
	testkit.RequireRoot(t)
	testkit.RequireTool(t, "mkfs.ext4")
	old := dioDelay
	dioDelay = 300 * time.Millisecond
	t.Cleanup(func() { dioDelay = old })
	data, err := os.MkdirTemp("/var/tmp", "moat-disk-test-") // ext4 here: /tmp may be tmpfs
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(data) })
	dir := filepath.Join(data, "sb")
	if err := os.MkdirAll(filepath.Join(dir, "disk"), 0o755); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "disk")
	if err := NewDisks(data).Mount(context.Background(), filepath.Join(dir, "disk.img"), target, 64, func(string) {}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(target, unix.MNT_DETACH) })
	loop := loopOf(t, target)
	if got := dio(t, loop); got != "0" {
		t.Errorf("dio right after the mount: %s, want 0", got)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "disk.img"), &st); err != nil {
		t.Fatal(err)
	}
	directIO("/dev/"+loop, st.Dev, st.Ino+1) // another image's
	if got := dio(t, loop); got != "0" {
		t.Errorf("dio after directIO for another image: %s, want 0", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for dio(t, loop) != "1" {
		if time.Now().After(deadline) {
			t.Fatalf("no direct I/O %v after the mount", 10*time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := os.WriteFile(filepath.Join(target, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
}
