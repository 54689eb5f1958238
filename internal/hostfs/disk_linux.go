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
// <DataDir>/disks: no journal (the layer dies with its sandbox) and no
// blocks reserved for root.
func (d *Disks) blankDisk(ctx context.Context, mib int) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	dir := d.dir
	p := filepath.Join(dir, fmt.Sprintf("ext4-%dm.img", mib))
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("blank disk: %w", err)
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, nil, 0o600); err != nil {
		return "", fmt.Errorf("blank disk: %w", err)
	}
	defer os.Remove(tmp)
	if err := os.Truncate(tmp, int64(mib)<<20); err != nil {
		return "", fmt.Errorf("blank disk: %w", err)
	}
	out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-O", "^has_journal",
		"-E", "lazy_itable_init=1,nodiscard", "-m", "0", tmp).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("blank disk: mkfs.ext4: %w: %s", err, strings.TrimSpace(string(out)))
	}
	if err := os.Rename(tmp, p); err != nil {
		return "", fmt.Errorf("blank disk: %w", err)
	}
	return p, nil
}

// Mount copies the blank image of mib MiB to img (sparse: only the
// filesystem's metadata) and mounts it on target. step is called at the end
// of the copy ("disk_copy") and of the mount ("disk_mount"), for the
// caller's timings.
func (d *Disks) Mount(ctx context.Context, img, target string, mib int, step func(name string)) error {
	blank, err := d.blankDisk(ctx, mib)
	if err != nil {
		return err
	}
	if _, err := sparse.Copy(blank, img); err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	step("disk_copy")
	err = LoopMount(img, target, "ext4", unix.MS_NOSUID|unix.MS_NODEV)
	step("disk_mount")
	return err
}

// LoopMount attaches img to a free loop device that detaches itself once
// unmounted (LO_FLAGS_AUTOCLEAR) and mounts it on target (sandbox disks
// here, volume images in internal/volume). Direct I/O keeps the data out
// of the page cache twice when the host filesystem allows it.
func LoopMount(img, target, fstype string, flags uintptr) error {
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
		done, err := attachAndMount(f, dev, img, target, fstype, flags)
		if done {
			return err
		}
	}
	return fmt.Errorf("loop mount %s: no free loop device after 20 tries", img)
}

// attachAndMount binds f to dev and mounts dev on target; done is false when
// dev was taken meanwhile.
func attachAndMount(f *os.File, dev, img, target, fstype string, flags uintptr) (done bool, err error) {
	lf, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return true, fmt.Errorf("loop mount: %w", err)
	}
	defer lf.Close() // with autoclear, a failed mount detaches the device here
	cfg := unix.LoopConfig{Fd: uint32(f.Fd()), Info: unix.LoopInfo64{Flags: unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO}}
	copy(cfg.Info.File_name[:unix.LO_NAME_SIZE-1], img)
	if err := unix.IoctlLoopConfigure(int(lf.Fd()), &cfg); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return false, nil
		}
		return true, fmt.Errorf("loop mount: attach %s to %s: %w", img, dev, err)
	}
	if err := unix.Mount(dev, target, fstype, flags, ""); err != nil {
		return true, fmt.Errorf("loop mount: mount %s (%s) on %s: %w", dev, img, target, err)
	}
	return true, nil
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
