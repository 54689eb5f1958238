package container

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/hostfs"
	"github.com/moatsh/moat/internal/runtime"
)

// waitReady waits until envd accepts a connection. envd writes a line to
// its log (envd.log on the sandbox's log tmpfs) once it listens, so a dial
// is tried at the start, after each write to the log (inotify) and at
// least every readyPoll. The wait used to dial again after a pause of
// 50 µs doubling up to 250 µs: a refused dial costs tens of µs of CPU, and
// in a burst of 100 creates those dials took ~2 % of the host's CPU. If
// the log cannot be watched (no inotify instance left), it falls back to
// that schedule.
func (r *Runtime) waitReady(ctx context.Context, h *runtime.Handle, init *runtime.Process) error {
	ctx, cancel := context.WithTimeout(ctx, r.o.readyTimeout)
	defer cancel()
	addr := net.JoinHostPort(h.Addr.String(), strconv.Itoa(envdPort))
	w, err := watchWrites(r.logPath(h.ID))
	if err != nil {
		r.log.DebugContext(ctx, "envd readiness by polling", "sandbox", h.ID, "err", err)
	} else {
		defer w.Close()
	}
	var d net.Dialer
	delay := 50 * time.Microsecond
	for {
		dctx, dcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		c, err := d.DialContext(dctx, "tcp", addr)
		dcancel()
		if err == nil {
			c.Close()
			return nil
		}
		if (w != nil || delay == maxReadyDelay) && init.Exited() {
			tail, _ := hostfs.Tail(r.logPath(h.ID), 2048)
			return fmt.Errorf("sandbox %s: envd exited before listening on %s: %w (envd.log: %q)", h.ID, addr, errdefs.ErrUnavailable, tail)
		}
		if w != nil {
			err = w.wait(ctx, readyPoll)
		} else {
			err = sleep(ctx, delay)
			delay = min(2*delay, maxReadyDelay)
		}
		if err != nil {
			tail, _ := hostfs.Tail(r.logPath(h.ID), 2048)
			return fmt.Errorf("sandbox %s: envd not reachable at %s: %w (envd.log: %q)", h.ID, addr, errors.Join(err, errdefs.ErrUnavailable), tail)
		}
	}
}

const (
	// maxReadyDelay is the longest pause between two dials without inotify.
	maxReadyDelay = 250 * time.Microsecond
	// readyPoll is the longest pause between two dials with inotify: a
	// write to the log the watch missed costs at most this much.
	readyPoll = 2 * time.Millisecond
)

// sleep waits d or until ctx ends (its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// writeWatch is an inotify instance watching one file for writes.
type writeWatch struct {
	f   *os.File
	buf [4096]byte
}

// watchWrites watches path for writes.
func watchWrites(path string) (*writeWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, path, unix.IN_MODIFY); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify watch %s: %w", path, err)
	}
	// Non-blocking, so the runtime's poller waits on it (read deadlines).
	return &writeWatch{f: os.NewFile(uintptr(fd), "inotify:"+path)}, nil
}

// wait returns when the file was written since the last wait (at once if it
// was), after at most d, or with ctx's error when ctx ends first.
func (w *writeWatch) wait(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	if err := w.f.SetReadDeadline(deadline); err != nil {
		return err
	}
	_, err := w.f.Read(w.buf[:]) // drains the queued events
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("inotify: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// The read's deadline can pass a moment before ctx's own timer ends it.
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// Close releases the inotify instance in the background: the kernel's
// release of an inotify instance waits for a grace period of the
// notification marks (fsnotify_destroy_group), ~10 ms per create in a
// burst here, during which the create held its admission slot and did
// nothing.
func (w *writeWatch) Close() error {
	go w.f.Close()
	return nil
}
