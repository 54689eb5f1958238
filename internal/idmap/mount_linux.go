package idmap

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

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
	return mountNS(src, dst, nsfd)
}

// mountNS is Mount through the user namespace nsfd.
func mountNS(src, dst string, nsfd int) error {
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
// of sandboxes). Each range has its own entry, so that namespaces for
// different ranges are made at once (a burst of creates made them one
// after another, behind one lock, while each cost a process start).
var userNSCache struct {
	sync.Mutex
	ns map[uint32]*userNSEntry
}

type userNSEntry struct {
	once sync.Once
	fd   int
	err  error
}

func cachedUserNS(r Range) (int, error) {
	userNSCache.Lock()
	if userNSCache.ns == nil {
		userNSCache.ns = map[uint32]*userNSEntry{}
	}
	e, ok := userNSCache.ns[r.Host]
	if !ok {
		e = &userNSEntry{}
		userNSCache.ns[r.Host] = e
	}
	userNSCache.Unlock()
	e.once.Do(func() { e.fd, e.err = userNS(r) })
	if e.err != nil {
		userNSCache.Lock()
		if userNSCache.ns[r.Host] == e { // the next call tries again
			delete(userNSCache.ns, r.Host)
		}
		userNSCache.Unlock()
		return -1, e.err
	}
	return e.fd, nil
}

// userNS returns a file descriptor of a new user namespace with r's
// mapping: from a small process that unshares it (userNSUnshare), else
// from a fork of this one (userNSFork).
func userNS(r Range) (int, error) {
	fd, err := userNSUnshare(r)
	if err == nil {
		return fd, nil
	}
	fd, ferr := userNSFork(r)
	if ferr != nil {
		return -1, fmt.Errorf("%w (and %w)", ferr, err)
	}
	return fd, nil
}

// userNSUnshare starts util-linux's `unshare --user -- cat`, waits until
// it is in a user namespace of its own, writes r's mapping into it (this
// process is root of the parent namespace), opens it and kills the
// process; the descriptor keeps the namespace alive. exec.Cmd starts a
// child that makes no namespace of its own with vfork, whereas a child
// started in a new user namespace is a fork of this whole process: its
// page tables copied, then every page of the server's heap faulted back
// to writable after it, ~10 % of the CPU of a server's first burst of 100
// creates here (the next bursts reuse the namespaces). cat reads a pipe
// from this process, so it ends with it (a parent-death signal would not
// do: it follows the thread that started the child, and Go ends threads).
func userNSUnshare(r Range) (int, error) {
	self, err := os.Readlink("/proc/self/ns/user")
	if err != nil {
		return -1, fmt.Errorf("idmap: %w", err)
	}
	cmd := exec.Command("unshare", "--user", "--", "cat")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return -1, fmt.Errorf("idmap: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("idmap: start unshare: %w", err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() {
		stdin.Close()
		_ = cmd.Process.Kill()
		<-exited
	}()
	proc := "/proc/" + strconv.Itoa(cmd.Process.Pid)
	if err := waitUnshared(proc, self, exited); err != nil {
		if errors.Is(err, errExited) {
			err = fmt.Errorf("%w: %v", err, waitErr)
		}
		return -1, err
	}
	line := []byte("0 " + strconv.Itoa(r.Root()) + " " + strconv.Itoa(Size) + "\n")
	for _, m := range []string{"uid_map", "gid_map"} {
		if err := os.WriteFile(proc+"/"+m, line, 0); err != nil {
			return -1, fmt.Errorf("idmap: write %s: %w", m, err)
		}
	}
	return openUserNS(cmd.Process.Pid)
}

// openUserNS opens the user namespace of process pid; the descriptor
// keeps it alive after the process.
func openUserNS(pid int) (int, error) {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("idmap: open user namespace: %w", err)
	}
	return fd, nil
}

var errExited = errors.New("idmap: unshare ended before it made a user namespace")

// waitUnshared waits until the process at proc is in another user
// namespace than self, for at most 5 s; errExited once exited is closed.
func waitUnshared(proc, self string, exited <-chan struct{}) error {
	delay := 20 * time.Microsecond
	for deadline := time.Now().Add(5 * time.Second); ; {
		if ns, err := os.Readlink(proc + "/ns/user"); err == nil && ns != self {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("idmap: unshare did not make a user namespace in 5 s")
		}
		select {
		case <-exited:
			return errExited
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Millisecond)
	}
}

// userNSFork returns a file descriptor of a new user namespace with r's
// mapping. A multi-threaded Go process cannot unshare one itself, so a
// short-lived child is started in it, its namespace opened, and the child
// killed; the descriptor keeps the namespace alive. The child is traced, so
// it stops before the first instruction of the program it executes.
func userNSFork(r Range) (int, error) {
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
	return openUserNS(cmd.Process.Pid)
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
