package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Process is a host process this server did not necessarily start (a
// container's init, an adopted QEMU), watched through a pidfd: its exit
// is an event (the descriptor becomes readable), not a state to poll
// /proc for, and the PID cannot be reused under it.
type Process struct {
	pid int
	f   *os.File // the pidfd, non-blocking
}

// OpenProcess opens a pidfd for pid. Open it while pid is known to be the
// process meant (right after starting it, or after checking its command
// line): a pidfd of a reused PID watches the wrong process.
func OpenProcess(pid int) (*Process, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("pidfd of process %d: %w", pid, err)
	}
	return &Process{pid: pid, f: os.NewFile(uintptr(fd), "pidfd:"+strconv.Itoa(pid))}, nil
}

// PID is the process's ID.
func (p *Process) PID() int { return p.pid }

// Exited reports without blocking whether the process has exited.
func (p *Process) Exited() bool {
	rc, err := p.f.SyscallConn()
	if err != nil {
		return true
	}
	exited := true
	_ = rc.Control(func(fd uintptr) { exited = readable(int(fd)) })
	return exited
}

// Wait blocks until the process exits (nil) or ctx ends (ctx.Err()).
// Concurrent Waits with different contexts are independent.
func (p *Process) Wait(ctx context.Context) error {
	// Each wait polls its own duplicate, so that ending one wait (a read
	// deadline) leaves the others alone.
	rc, err := p.f.SyscallConn()
	if err != nil {
		return fmt.Errorf("wait for process %d: %w", p.pid, err)
	}
	dup := -1
	var dupErr error
	if cerr := rc.Control(func(fd uintptr) { dup, dupErr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); cerr != nil {
		return fmt.Errorf("wait for process %d: %w", p.pid, cerr)
	}
	if dupErr != nil {
		return fmt.Errorf("wait for process %d: %w", p.pid, dupErr)
	}
	f := os.NewFile(uintptr(dup), "pidfd:"+strconv.Itoa(p.pid))
	defer f.Close()
	stop := context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	drc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("wait for process %d: %w", p.pid, err)
	}
	// Returning false parks the goroutine in Go's poller until the pidfd
	// is readable, which it becomes when the process exits.
	err = drc.Read(func(fd uintptr) bool { return readable(int(fd)) })
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, os.ErrDeadlineExceeded):
		return context.DeadlineExceeded
	}
	// Go's poller refused the descriptor (it never does for a pidfd on
	// the kernels Moat supports): wait in poll(2) slices instead.
	for {
		var exited bool
		if cerr := drc.Control(func(fd uintptr) { exited = pollFor(int(fd), 100) }); cerr != nil {
			return fmt.Errorf("wait for process %d: %w", p.pid, errors.Join(err, cerr))
		}
		if exited {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// Close releases the pidfd.
func (p *Process) Close() error { return p.f.Close() }

// Kill sends SIGKILL through the pidfd, so never to a process that
// reused the PID; one that already exited is no error.
func (p *Process) Kill() error {
	rc, err := p.f.SyscallConn()
	if err != nil {
		return fmt.Errorf("kill process %d: %w", p.pid, err)
	}
	var kerr error
	if cerr := rc.Control(func(fd uintptr) { kerr = unix.PidfdSendSignal(int(fd), unix.SIGKILL, nil, 0) }); cerr != nil {
		return fmt.Errorf("kill process %d: %w", p.pid, cerr)
	}
	if kerr != nil && !errors.Is(kerr, unix.ESRCH) {
		return fmt.Errorf("kill process %d: %w", p.pid, kerr)
	}
	return nil
}

// readable polls fd without blocking.
func readable(fd int) bool { return pollFor(fd, 0) }

// pollFor reports whether fd becomes readable (or fails) within ms.
func pollFor(fd, ms int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, ms)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		return err != nil || (n > 0 && fds[0].Revents != 0)
	}
}
