package idmap

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Mount makes a read-only idmapped bind mount of src at dst (an existing
// directory): a file owned by N under src appears owned by r.Host+N under
// dst. Unmount dst like any mount.
func Mount(src, dst string, r Range) error {
	nsfd, err := cachedUserNS(r)
	if err != nil {
		return err
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("idmap: open_tree %s: %w", src, err)
	}
	defer unix.Close(fd)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(nsfd)}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("idmap: idmap %s: %w", src, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("idmap: mount %s on %s: %w", src, dst, err)
	}
	return nil
}

// userNSCache keeps one user namespace per range ever used (ranges are
// reused after a sandbox ends, so the set stays as large as the peak number
// of sandboxes): making one costs a process start (~5 ms).
var userNSCache struct {
	sync.Mutex
	fds map[uint32]int
}

func cachedUserNS(r Range) (int, error) {
	userNSCache.Lock()
	defer userNSCache.Unlock()
	if fd, ok := userNSCache.fds[r.Host]; ok {
		return fd, nil
	}
	fd, err := userNS(r)
	if err != nil {
		return -1, err
	}
	if userNSCache.fds == nil {
		userNSCache.fds = map[uint32]int{}
	}
	userNSCache.fds[r.Host] = fd
	return fd, nil
}

// userNS returns a file descriptor of a new user namespace with r's
// mapping. A multi-threaded Go process cannot unshare one itself, so a
// short-lived child is started in it, its namespace opened, and the child
// killed; the descriptor keeps the namespace alive. The child is traced, so
// it stops before the first instruction of the program it executes.
func userNS(r Range) (int, error) {
	runtime.LockOSThread() // the tracer is this thread
	defer runtime.UnlockOSThread()
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: r.Root(), Size: Size}}
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"moat-idmap-holder"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: m, GidMappings: m,
		Ptrace: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("idmap: start user namespace holder: %w", err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	fd, err := unix.Open("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("idmap: open user namespace: %w", err)
	}
	return fd, nil
}

// OpenTree returns a detached, read-write idmapped copy of the mount at
// src (not of mounts below it): files owned by N under src are owned by
// r.Host+N through it, and a process of r's user namespace that creates
// a file as its ID N makes it N's under src. It is nosuid and nodev, plus
// the MOUNT_ATTR_* flags in extra (MOUNT_ATTR_NOEXEC,
// MOUNT_ATTR_NOSYMFOLLOW: the kernel then follows no symlink on it).
// Attach it with move_mount; closing the descriptor of a copy never
// attached drops it.
func OpenTree(src string, r Range, extra uint64) (*os.File, error) {
	nsfd, err := cachedUserNS(r)
	if err != nil {
		return nil, err
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("idmap: open_tree %s: %w", src, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | extra,
		Userns_fd: uint64(nsfd)}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("idmap: idmap %s: %w", src, err)
	}
	return os.NewFile(uintptr(fd), "idmapped:"+src), nil
}
