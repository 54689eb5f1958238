package hostfs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/bench/benchpair"
	"github.com/moatsh/moat/internal/mountinfo"
	"github.com/moatsh/moat/internal/sparse"
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

// withResizeInode is blankArgs as they were: mkfs.ext4's default resize
// inode kept.
var withResizeInode = []string{"-q", "-F", "-O", "^has_journal", "-E", "lazy_itable_init=1,nodiscard", "-m", "0"}

// dataKiB is how much of the sparse file p holds data.
func dataKiB(t testing.TB, p string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks / 2
}

// A blank 2 GiB sandbox disk holds little metadata (no resize inode):
// what every create copies and writes out at the loop device's attach.
func TestBlankDiskSmall(t *testing.T) {
	testkit.RequireRoot(t)
	testkit.RequireTool(t, "mkfs.ext4")
	data := t.TempDir()
	p, err := NewDisks(data).blankDisk(context.Background(), 2048)
	if err != nil {
		t.Fatal(err)
	}
	if kib := dataKiB(t, p); kib > 256 {
		t.Errorf("blank 2 GiB disk holds %d KiB of data, want ≤ 256", kib)
	}
}

// BenchmarkDiskAttach times a create's disk steps (sparse copy of the blank
// image, loop attach, mount; then unmount) for the blank image without a
// resize inode against one with it, alternately, in the same process.
func BenchmarkDiskAttach(b *testing.B) {
	testkit.RequireRoot(b)
	testkit.RequireTool(b, "mkfs.ext4")
	data, err := os.MkdirTemp("/var/tmp", "moat-disk-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(data)
	imgs := map[string]string{}
	for name, args := range map[string][]string{"now": blankArgs, "before": withResizeInode} {
		imgs[name] = filepath.Join(data, name+".img")
		if err := makeBlank(context.Background(), imgs[name], 2048, args); err != nil {
			b.Fatal(err)
		}
	}
	target := filepath.Join(data, "mnt")
	if err := os.Mkdir(target, 0o755); err != nil {
		b.Fatal(err)
	}
	attach := func(blank string) time.Duration {
		img := filepath.Join(data, "disk.img")
		start := time.Now()
		if _, err := sparse.Copy(blank, img); err != nil {
			b.Fatal(err)
		}
		if err := LoopMount(img, target, "ext4", unix.MS_NOSUID|unix.MS_NODEV, "noinit_itable"); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		if err := unix.Unmount(target, 0); err != nil {
			b.Fatal(err)
		}
		os.Remove(img)
		return d
	}
	benchpair.Compare(b, fmt.Sprintf("disk copy+attach+mount (%d KiB of metadata; with a resize inode %d KiB)",
		dataKiB(b, imgs["now"]), dataKiB(b, imgs["before"])),
		benchpair.Way{Name: "no-resize-inode", Run: func() time.Duration { return attach(imgs["now"]) }},
		benchpair.Way{Name: "resize-inode", Run: func() time.Duration { return attach(imgs["before"]) }})
}
