package hostfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/mountinfo"
	"github.com/moatsh/moat/internal/netpolicy"
)

// MountRootfs mounts the template's idmapped view on <dir>/lower and, on
// <dir>/rootfs, an overlay of it (read-only lower layer) with the sandbox's
// upper and work dirs in <dir>/disk.
func MountRootfs(template, dir string, ids idmap.Range) error {
	lower := filepath.Join(dir, "lower")
	if err := idmap.Mount(template, lower, ids); err != nil {
		return err
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s",
		lower, filepath.Join(dir, "disk", "upper"), filepath.Join(dir, "disk", "work"))
	if err := unix.Mount("overlay", filepath.Join(dir, "rootfs"), "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay %s: %w", opts, err)
	}
	return nil
}

// mounts are the mount points in a sandbox dir, in unmount order; disk is
// a plain directory when the sandbox has no disk quota.
var mounts = []string{"rootfs", "lower", "sys", "log", "disk"}

// MakeMountPoints makes the (empty) mount points in the sandbox dir dir.
func MakeMountPoints(dir string) error {
	for _, d := range mounts {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// LogCap bounds envd's stdout/stderr: the log is the only file on a tmpfs of
// this size on <dir>/log (see MountLog).
const LogCap = 1 << 20

// LogName is envd's stdout/stderr (and the OCI runtime's) on the log mount.
const LogName = "envd.log"

// MountLog mounts a tmpfs of LogCap bytes on <dir>/log for envd's output.
// The sandbox holds that file open and its root can take the descriptor
// (pidfd_getfd, /proc/1/fd/2), so it must lead nowhere on the host: writes
// stop with ENOSPC at the cap, the pages are charged to the memory cgroup of
// the writer (the sandbox's), the directory is not in the sandbox's view, and
// the mount lives as long as the sandbox dir, across `moat serve` restarts.
func MountLog(dir string) error {
	target := filepath.Join(dir, "log")
	opts := fmt.Sprintf("size=%d,nr_inodes=16,mode=0700", LogCap)
	if err := unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("mount log tmpfs on %s: %w", target, err)
	}
	return nil
}

// UnmountAll unmounts every mount in the sandbox dir dir (volumes first);
// not mounted is fine.
func UnmountAll(dir string) error {
	for _, m := range append(volumeMountPoints(dir), mounts...) {
		if err := unmount(filepath.Join(dir, m)); err != nil {
			return err
		}
	}
	return nil
}

// MountSysfs mounts, read-only on target, a sysfs of the network namespace
// at nsPath (its /sys/class/net lists only that namespace's devices).
func MountSysfs(nsPath, target string) error {
	err := netpolicy.InNetns(nsPath, func() error {
		return unix.Mount("sysfs", target, "sysfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	})
	if err != nil {
		return fmt.Errorf("mount sysfs on %s: %w", target, err)
	}
	return nil
}

// unmount unmounts p, lazily when busy; not mounted is fine.
func unmount(p string) error {
	for i := 0; i < 3; i++ {
		err := unix.Unmount(p, 0)
		switch {
		case err == nil:
			continue // stacked mounts: unmount until EINVAL
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.EBUSY):
			time.Sleep(10 * time.Millisecond)
			if i == 2 {
				if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
					return fmt.Errorf("lazy unmount %s: %w", p, err)
				}
				return nil
			}
		default:
			return fmt.Errorf("unmount %s: %w", p, err)
		}
	}
	return nil
}

// RemoveDir deletes the sandbox directory, refusing while one of mounts
// or a volume is still a mount point (RemoveAll would otherwise walk into
// the template, or delete a volume's files), and refusing too when that
// cannot be told: on this destructive path not knowing is no.
func RemoveDir(dir string) error {
	table := sync.OnceValues(mountTable) // only where statx cannot tell, and then once
	for _, m := range append(volumeMountPoints(dir), mounts...) {
		on, err := mounted(filepath.Join(dir, m), table)
		if err != nil {
			return fmt.Errorf("remove %s: %w", dir, err)
		}
		if on {
			return fmt.Errorf("remove %s: %s still mounted", dir, m)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// mounted says whether p is a mount point of this mount namespace (a
// variable so that a test can make it fail). It asks statx(2) for p's
// STATX_ATTR_MOUNT_ROOT (Linux ≥ 5.8): reading the mount table instead
// costs O(mounts on the host), and every kill asks this of its sandbox's
// mount points, so a host of n sandboxes spent O(n²) on its kills (1.5 ms
// per kill with 100 sandboxes). A kernel that does not report the
// attribute gets the mount table from table.
var mounted = func(p string, table func() ([]string, error)) (bool, error) {
	var st unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT, unix.STATX_TYPE, &st)
	switch {
	case errors.Is(err, unix.ENOENT):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("stat %s: %w", p, err)
	case st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0:
		return st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
	}
	return inMountTable(p, table)
}

// mountTable lists this mount namespace's mount points (a variable so that
// a test can count the reads).
var mountTable = mountinfo.Points

// inMountTable says whether p is a mount point by the mount table.
func inMountTable(p string, table func() ([]string, error)) (bool, error) {
	points, err := table()
	if err != nil {
		return false, fmt.Errorf("read the mount table: %w", err)
	}
	return slices.Contains(points, p), nil
}

// Tail returns up to n bytes from the end of a file (an envd log, for
// error messages), without surrounding white space.
func Tail(path string, n int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, err := io.ReadAll(f)
	return string(bytes.TrimSpace(b)), err
}
