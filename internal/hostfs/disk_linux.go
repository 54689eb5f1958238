package hostfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/sparse"
)

// A sandbox's writable layer (the overlay's upper and work dirs) lives on a
// filesystem of its own when Spec.DiskMiB is set: <dir>/disk.img, a sparse
// ext4 image of that size, mounted on <dir>/disk through a loop device. A
// sandbox that fills its disk gets ENOSPC at its quota instead of filling the
// host's, and the image costs only what the sandbox wrote.

// Disks makes sandbox disks from blank images kept in one directory. Safe
// for concurrent use.
type Disks struct {
	dir string     // the blank images: <DataDir>/disks
	mu  sync.Mutex // serialises making blank disk images
}

// NewDisks keeps its blank images in <dataDir>/disks.
func NewDisks(dataDir string) *Disks { return &Disks{dir: filepath.Join(dataDir, "disks")} }

// blankDisk returns an empty ext4 image of mib MiB, made once per size under
// <DataDir>/disks (see blankArgs). An image of the format before
// (ext4-<mib>m.img, with a resize inode) is removed when its successor is
// made.
func (d *Disks) blankDisk(ctx context.Context, mib int) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	dir := d.dir
	p := filepath.Join(dir, fmt.Sprintf("ext4-%dm-2.img", mib))
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("blank disk: %w", err)
	}
	if err := makeBlank(ctx, p, mib, blankArgs); err != nil {
		return "", err
	}
	_ = os.Remove(filepath.Join(dir, fmt.Sprintf("ext4-%dm.img", mib)))
	return p, nil
}

// blankArgs are mkfs.ext4's options for a sandbox disk: no journal (the
// layer dies with its sandbox), no blocks reserved for root, inode tables
// left to the kernel, and no resize inode. The disk never grows, and the
// resize inode's reserved descriptor blocks were 1,020 of the image's
// 1,108 KiB of metadata (2 GiB disk): every create copied them, and
// attaching the loop device waited for them to be written to the disk
// (the kernel syncs the backing file at LOOP_CONFIGURE).
var blankArgs = []string{"-q", "-F", "-O", "^has_journal,^resize_inode", "-E", "lazy_itable_init=1,nodiscard", "-m", "0"}

// makeBlank makes the ext4 image p of mib MiB with mkfs.ext4 args.
func makeBlank(ctx context.Context, p string, mib int, args []string) error {
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, nil, 0o600); err != nil {
		return fmt.Errorf("blank disk: %w", err)
	}
	defer os.Remove(tmp)
	if err := os.Truncate(tmp, int64(mib)<<20); err != nil {
		return fmt.Errorf("blank disk: %w", err)
	}
	out, err := exec.CommandContext(ctx, "mkfs.ext4", append(args, tmp)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("blank disk: mkfs.ext4: %w: %s", err, strings.TrimSpace(string(out)))
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("blank disk: %w", err)
	}
	return nil
}

// Mount copies the blank image of mib MiB to img (sparse: only the
// filesystem's metadata) and mounts it on target. step is called at the end
// of the copy ("disk_copy") and of the mount ("disk_mount"), for the
// caller's timings. The kernel does not zero the image's inode tables
// behind the mount (noinit_itable): the sparse image reads as zeros
// there already, and the zeroing cost each new sandbox a kernel thread's
// work and I/O during the next creates.
func (d *Disks) Mount(ctx context.Context, img, target string, mib int, step func(name string)) error {
	blank, err := d.blankDisk(ctx, mib)
	if err != nil {
		return err
	}
	if _, err := sparse.Copy(blank, img); err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	step("disk_copy")
	err = LoopMount(img, target, "ext4", unix.MS_NOSUID|unix.MS_NODEV, "noinit_itable")
	step("disk_mount")
	return err
}

// LoopMount attaches img to a free loop device that detaches itself once
// unmounted (LO_FLAGS_AUTOCLEAR) and mounts it on target with data (sandbox
// disks here, volume images in internal/volume). Direct I/O keeps the data
// out of the page cache twice when the host filesystem allows it; it is
// turned on after the mount, in the background (see attachAndMount).
func LoopMount(img, target, fstype string, flags uintptr, data string) error {
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("loop mount: %w", err)
	}
	defer f.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("loop mount: %w", err)
	}
	defer ctl.Close()
	for range 20 { // another attach may take the free device first
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return fmt.Errorf("loop mount: find a free loop device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		done, err := attachAndMount(f, dev, img, target, fstype, flags, data)
		if done {
			return err
		}
	}
	return fmt.Errorf("loop mount %s: no free loop device after 20 tries", img)
}

// attachAndMount binds f to dev and mounts dev on target; done is false when
// dev was taken meanwhile. The device starts with buffered I/O and gets
// direct I/O dioDelay later (see directIO): turning it on writes the
// image's dirty pages to the disk (a just-copied image is all dirty) and
// freezes the device's queue until its requests are done. At the mount it
// cost ~14 ms of waiting per create in a burst; from a goroutine right
// after the mount, the create's next writes to the disk waited for the
// frozen queue instead (~7 ms per create). Later, the create is long done,
// and a sandbox killed before never writes its image out at all.
func attachAndMount(f *os.File, dev, img, target, fstype string, flags uintptr, data string) (done bool, err error) {
	lf, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return true, fmt.Errorf("loop mount: %w", err)
	}
	defer lf.Close() // with autoclear, a failed mount detaches the device here
	cfg := unix.LoopConfig{Fd: uint32(f.Fd()), Info: unix.LoopInfo64{Flags: unix.LO_FLAGS_AUTOCLEAR}}
	copy(cfg.Info.File_name[:unix.LO_NAME_SIZE-1], img)
	if err := unix.IoctlLoopConfigure(int(lf.Fd()), &cfg); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return false, nil
		}
		return true, fmt.Errorf("loop mount: attach %s to %s: %w", img, dev, err)
	}
	if err := unix.Mount(dev, target, fstype, flags, data); err != nil {
		return true, fmt.Errorf("loop mount: mount %s (%s) on %s: %w", dev, img, target, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err == nil {
		time.AfterFunc(dioDelay, func() { directIO(dev, st.Dev, st.Ino) })
	}
	return true, nil
}

// dioDelay is how long a loop device runs with buffered I/O after its
// mount (see attachAndMount).
var dioDelay = 10 * time.Second

// directIO turns on direct I/O for the loop device dev if it still holds
// the image with device and inode numbers imgDev and imgIno (the sandbox
// may be gone, and the device another's). A filesystem without O_DIRECT
// refuses, and a device detached meanwhile fails: both keep buffered I/O,
// which is correct.
func directIO(dev string, imgDev, imgIno uint64) {
	lf, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer lf.Close()
	info, err := unix.IoctlLoopGetStatus64(int(lf.Fd()))
	if err != nil || info.Device != imgDev || info.Inode != imgIno {
		return
	}
	_ = unix.IoctlSetInt(int(lf.Fd()), unix.LOOP_SET_DIRECT_IO, 1)
}

// DiskUsage reads the used and total bytes of the disk of the sandbox dir
// dir; zeros when it has none (no quota: its layer shares the host's
// filesystem).
func DiskUsage(dir string) (used, total uint64) {
	if _, err := os.Stat(filepath.Join(dir, "disk.img")); err != nil {
		return 0, 0
	}
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Join(dir, "disk"), &st); err != nil {
		return 0, 0
	}
	bs := uint64(st.Bsize)
	return (st.Blocks - st.Bfree) * bs, st.Blocks * bs
}
