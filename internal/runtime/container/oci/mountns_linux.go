package oci

import (
	"errors"
	"fmt"
	"os/exec"
	goruntime "runtime"

	"golang.org/x/sys/unix"
)

// cgroup2Mount is the cgroup2 mount of a hybrid host, which crun must not see.
const cgroup2Mount = "/sys/fs/cgroup/unified"

// The main thread must never run runHidden's goroutine: Go cannot end
// it, so it would stay in that mount namespace for good, and
// /proc/self/mountinfo, which shows the main thread's mounts, would go
// stale (package hostfs would see sandboxes' mounts long unmounted). Locking
// it to the main goroutine keeps every other goroutine off it.
func init() { goruntime.LockOSThread() }

// RunCmd runs cmd (from Command) to its end. With hideCgroup2 it is
// started in a copy of the lean base when there is one (lean_linux.go: the
// base has no cgroup2 mount either, and a copy of it costs the same
// whatever the number of sandboxes, where a copy of the host's namespace
// grew with their mounts: every kill and delete paid for it), else by
// runHidden; without hideCgroup2 as usual.
func (o *CLI) RunCmd(cmd *exec.Cmd) error {
	if !o.hideCgroup2 {
		return cmd.Run()
	}
	if l := o.lean; l != nil && !l.closed.Load() {
		return l.runWith(cmd, nil)
	}
	return runHidden(cmd)
}

// runHidden runs cmd to its end from a new OS thread that has a private
// mount namespace without the cgroup2 mount (crun refuses hybrid hosts
// otherwise): a child inherits the mount namespace of the thread that
// forks it. This replaces `unshare -m sh -c 'umount …; exec crun'`, which
// cost three more execs (~5 ms) per OCI runtime call. The thread is never
// handed back to the Go scheduler (no UnlockOSThread): it waits for cmd
// and exits with its goroutine, so that it, not cmd, frees the namespace
// (see leanNS.runWith).
func runHidden(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		if unix.Gettid() == unix.Getpid() { // see init; never expected
			goruntime.UnlockOSThread()
			errc <- errors.New("private mount namespace: refusing to change the main thread's")
			return
		}
		errc <- func() error {
			if err := unshareMounts(true); err != nil {
				return fmt.Errorf("private mount namespace: %w", err)
			}
			if err := cmd.Start(); err != nil {
				return err
			}
			return cmd.Wait()
		}()
	}()
	return <-errc
}

// unshareMounts moves the calling thread (locked, never handed back) into
// a private copy of its mount namespace, without the cgroup2 mount of a
// hybrid host when hideCgroup2.
func unshareMounts(hideCgroup2 bool) error {
	if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	// Private first, so that the unmounts do not reach the host's namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	if hideCgroup2 {
		if err := unix.Unmount(cgroup2Mount, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount %s: %w", cgroup2Mount, err)
		}
	}
	return nil
}
