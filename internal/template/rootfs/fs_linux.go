package rootfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/mountinfo"
)

// SwapDirs moves the directory src to dst. When dst exists the two are
// exchanged atomically (renameat2 RENAME_EXCHANGE), so readers of dst never
// see it missing, and the old tree ends up at src for the caller to remove.
func SwapDirs(src, dst string) error {
	if _, err := os.Lstat(dst); errors.Is(err, os.ErrNotExist) {
		return os.Rename(src, dst)
	}
	err := unix.Renameat2(unix.AT_FDCWD, src, unix.AT_FDCWD, dst, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) { // filesystem without exchange
		old := dst + ".old"
		if err := os.Rename(dst, old); err != nil {
			return err
		}
		if err := os.Rename(src, dst); err != nil {
			return err
		}
		return os.Rename(old, src)
	}
	return err
}

// RemoveTree deletes a build work directory. A killed mmdebstrap can leave
// /proc, /sys or /dev of the host bind-mounted inside the chroot; deleting
// through such a mount would destroy host files, so mounts below dir are
// detached first, and the removal is refused if any remain.
func RemoveTree(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	mounts, err := mountsUnder(abs)
	if err != nil {
		return err
	}
	for _, m := range slices.Backward(mounts) {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
	}
	if mounts, err = mountsUnder(abs); err != nil {
		return err
	}
	if len(mounts) > 0 {
		return fmt.Errorf("refusing to remove %s: still mounted: %s", abs, strings.Join(mounts, ", "))
	}
	return os.RemoveAll(abs)
}

// mountsUnder lists mount points at or below dir, in mount order.
func mountsUnder(dir string) ([]string, error) {
	points, err := mountinfo.Points()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, mp := range points {
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out, nil
}

// InUseAsLowerdir reports whether a running sandbox uses the tree at dir:
// an overlay mount visible here has dir as a lower layer (overlayfs
// reports the path given at mount time, so this also matches mounts made
// from an older tree that was swapped out at the same path), or a mount
// has the tree as its root (the container runtime's idmapped view of a
// template, wherever the tree has moved since).
func InUseAsLowerdir(dir string) (bool, error) {
	es, err := mountinfo.Read(mountinfo.Path)
	if err != nil {
		return false, err
	}
	if hasLowerdir(es, dir) {
		return true, nil
	}
	return isMountRoot(es, dir)
}

// IsMountRoot reports whether a mount other than one on dir itself (a
// bind or idmapped mount) shows the directory dir as its root: a mount
// point on dir's filesystem whose root has dir's inode. It follows the
// tree, not its path, so it finds mounts of a tree renamed since.
func IsMountRoot(dir string) (bool, error) {
	es, err := mountinfo.Read(mountinfo.Path)
	if err != nil {
		return false, err
	}
	return isMountRoot(es, dir)
}

func isMountRoot(es []mountinfo.Entry, dir string) (bool, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("stat %s: %w", dir, err)
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	for _, e := range es {
		if e.Dev != dev || e.MountPoint == dir {
			continue
		}
		var m unix.Stat_t
		if unix.Stat(e.MountPoint, &m) == nil && m.Dev == st.Dev && m.Ino == st.Ino {
			return true, nil
		}
	}
	return false, nil
}

// hasLowerdir reports whether an overlay of es has lower layer dir
// ("... - overlay overlay rw,lowerdir=/a:/b,upperdir=...").
func hasLowerdir(es []mountinfo.Entry, dir string) bool {
	for _, e := range es {
		if e.FSType != "overlay" {
			continue
		}
		for _, opt := range e.SuperOptions {
			lower, ok := strings.CutPrefix(opt, "lowerdir=")
			if !ok {
				continue
			}
			for l := range strings.SplitSeq(lower, ":") {
				if filepath.Clean(mountinfo.Unescape(l)) == dir {
					return true
				}
			}
		}
	}
	return false
}

// LockFile takes an exclusive flock on path and returns its release.
func LockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}
