package qemu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// QEMU's stdout and stderr go to <dir>/log/qemu.log, where <dir>/log is a
// tmpfs of LogCap bytes that only holds that file: a guest that makes
// QEMU print without end (device emulation warnings) fills it and QEMU's
// further writes fail with ENOSPC, and the host's disk is never touched.
// The mount outlives `moat serve` (a restarted server adopts the QEMU
// with its log as it is); Kill, Pause and Recover's removal of orphans
// unmount it (see pushAll and release), a template boot's undo too.

// LogCap bounds a QEMU's log (the container runtime's envd log has the same cap).
const LogCap = 1 << 20

// LogDir is the tmpfs of the QEMU of sandbox or snapshot directory dir.
func LogDir(dir string) string { return filepath.Join(dir, "log") }

// LogPath is the log file of the QEMU of dir.
func LogPath(dir string) string { return filepath.Join(LogDir(dir), "qemu.log") }

// MountLog mounts the tmpfs for dir's QEMU log, unless one is mounted
// there already (a resume after a crash in the middle of a pause).
func MountLog(dir string) error {
	target := LogDir(dir)
	if err := os.Mkdir(target, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("qemu log: %w", err)
	}
	// The directory is root's (0700) in a directory the jailed QEMU can
	// write to: it must not be a link QEMU planted.
	if fi, err := os.Lstat(target); err != nil || !fi.IsDir() {
		return fmt.Errorf("qemu log: %s is not a directory", target)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err == nil && st.Type == unix.TMPFS_MAGIC {
		return nil
	}
	opts := fmt.Sprintf("size=%d,nr_inodes=8,mode=0700", LogCap)
	if err := unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("mount qemu log tmpfs on %s: %w", target, err)
	}
	return nil
}

// UnmountLog unmounts dir's QEMU log tmpfs (every mount stacked
// there; lazily if busy) and removes its directory; nothing mounted is fine.
func UnmountLog(dir string) error {
	target := LogDir(dir)
	for i := 0; i < 4; i++ {
		err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW)
		if errors.Is(err, unix.EBUSY) {
			err = unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		}
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			break
		}
		if err != nil {
			return fmt.Errorf("unmount qemu log %s: %w", target, err)
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("qemu log: %w", err)
	}
	return nil
}
