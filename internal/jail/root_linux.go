package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// rootDir is where the new root is assembled before pivot_root. The helper
// opens every source first, so covering this directory hides nothing it
// still needs; the namespace is private, so the host never sees it.
const rootDir = "/tmp"

// buildRoot makes the mount namespace private, assembles the jail's root
// on a tmpfs and pivots into it.
func buildRoot(cfg *Config) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	var links [][2]string // path, target: top-level symlinks of the host
	for _, p := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		if t, err := os.Readlink(p); err == nil {
			links = append(links, [2]string{p, t})
		}
	}
	mounts := sortMounts(append(systemMounts(), cfg.Mounts...))
	fds := make([]int, len(mounts))
	dirs := make([]bool, len(mounts))
	for i, m := range mounts {
		fd, err := unix.Open(m.Path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", m.Path, err)
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("stat %s: %w", m.Path, err)
		}
		fds[i], dirs[i] = fd, st.Mode&unix.S_IFMT == unix.S_IFDIR
	}
	if err := unix.Mount("tmpfs", rootDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=1m"); err != nil {
		return fmt.Errorf("root tmpfs: %w", err)
	}
	for _, l := range links {
		if err := os.Symlink(l[1], rootDir+l[0]); err != nil {
			return fmt.Errorf("symlink %s: %w", l[0], err)
		}
	}
	for i, m := range mounts {
		if err := bind(fds[i], dirs[i], m); err != nil {
			return err
		}
	}
	return pivot()
}

// bind mounts the source open as fd at its path under rootDir with m's
// flags. Directories on the way are created root-owned, mode 0755.
func bind(fd int, dir bool, m Mount) error {
	target := rootDir + m.Path
	if dir {
		if err := os.MkdirAll(target, 0o755); err != nil {
			return fmt.Errorf("mount point %s: %w", m.Path, err)
		}
	} else {
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return fmt.Errorf("mount point %s: %w", m.Path, err)
		}
		f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return fmt.Errorf("mount point %s: %w", m.Path, err)
		}
		f.Close()
	}
	src := "/proc/self/fd/" + strconv.Itoa(fd)
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", m.Path, err)
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_NOSUID)
	if !m.Writable {
		flags |= unix.MS_RDONLY
	}
	if !m.Device {
		flags |= unix.MS_NODEV
	}
	if !m.Exec {
		flags |= unix.MS_NOEXEC
	}
	if err := unix.Mount("", target, "", flags, ""); err != nil {
		return fmt.Errorf("remount %s: %w", m.Path, err)
	}
	return nil
}

// pivot makes rootDir the root, detaches the old one and makes the new
// root's tmpfs read-only.
func pivot() error {
	if err := unix.Chdir(rootDir); err != nil {
		return fmt.Errorf("chdir %s: %w", rootDir, err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	// The old root is stacked on the new one at "/": detach it.
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("remount / read-only: %w", err)
	}
	return nil
}

// dropPrivileges empties the bounding and ambient sets, switches to the
// jail's user and groups (which clears the permitted and effective sets),
// clears the inheritable set and sets no_new_privs.
func dropPrivileges(cfg *Config) error {
	for c := 0; c < 64; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if errors.Is(err, unix.EINVAL) { // past the last capability
				break
			}
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	groups := cfg.Groups
	if groups == nil {
		groups = []int{}
	}
	if err := syscall.Setgroups(groups); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(cfg.GID, cfg.GID, cfg.GID); err != nil {
		return fmt.Errorf("setresgid %d: %w", cfg.GID, err)
	}
	if err := syscall.Setresuid(cfg.UID, cfg.UID, cfg.UID); err != nil {
		return fmt.Errorf("setresuid %d: %w", cfg.UID, err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	unix.Umask(0o077)
	return nil
}
