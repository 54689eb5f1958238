package container

import (
	"bytes"
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

// waitReady waits until envd accepts connections. envd writes "envd
// listening on …" to its log (envd.log on the sandbox's log tmpfs) once its
// port listens, so with inotify the wait reads the log after each write to
// it (and at least every readyPoll) and returns when the line is there:
// no connection is made. A dial proves it instead at the start and at
// least every readyDial, for an envd that never writes the line. Without
// inotify (no instance left) it dials after a pause of 50 µs doubling up to
// 250 µs; a refused dial costs tens of µs of CPU, and in a burst of 100
// creates those dials took ~2 % of the host's CPU. The /init that follows
// waits for envd's health itself should envd not answer yet. Only the log
// from byte logFrom on counts: a resumed sandbox's log holds its earlier
// runs'.
func (r *Runtime) waitReady(ctx context.Context, h *runtime.Handle, init *runtime.Process, logFrom int64) error {
	ctx, cancel := context.WithTimeout(ctx, r.o.readyTimeout)
	defer cancel()
	addr := net.JoinHostPort(h.Addr.String(), strconv.Itoa(envdPort))
	logPath := r.logPath(h.ID)
	w, err := watchWrites(logPath)
	if err != nil {
		r.log.DebugContext(ctx, "envd readiness by polling", "sandbox", h.ID, "err", err)
	} else {
		defer w.Close()
	}
	var d net.Dialer
	delay := 50 * time.Microsecond
	var lastDial time.Time
	for {
		if w != nil && logSaysListening(logPath, logFrom) {
			return nil
		}
		if w == nil || time.Since(lastDial) >= readyDial {
			lastDial = time.Now()
			dctx, dcancel := context.WithTimeout(ctx, 200*time.Millisecond)
			c, err := d.DialContext(dctx, "tcp", addr)
			dcancel()
			if err == nil {
				c.Close()
				return nil
			}
		}
		if (w != nil || delay == maxReadyDelay) && init.Exited() {
			tail, _ := hostfs.Tail(logPath, 2048)
			return fmt.Errorf("sandbox %s: envd exited before listening on %s: %w (envd.log: %q)", h.ID, addr, errdefs.ErrUnavailable, tail)
		}
		if w != nil {
			err = w.wait(ctx, readyPoll)
		} else {
			err = sleep(ctx, delay)
			delay = min(2*delay, maxReadyDelay)
		}
		if err != nil {
			tail, _ := hostfs.Tail(logPath, 2048)
			return fmt.Errorf("sandbox %s: envd not reachable at %s: %w (envd.log: %q)", h.ID, addr, errors.Join(err, errdefs.ErrUnavailable), tail)
		}
	}
}

// listeningLine is what envd writes to its log once its port listens
// (cmd/envd).
var listeningLine = []byte("envd listening on ")

// logSaysListening reports whether the 8 KiB of envd's log at path from
// byte from on hold listeningLine.
func logSaysListening(path string, from int64) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [8 << 10]byte
	n, _ := f.ReadAt(b[:], from)
	return bytes.Contains(b[:n], listeningLine)
}

const (
	// maxReadyDelay is the longest pause between two dials without inotify.
	maxReadyDelay = 250 * time.Microsecond
	// readyPoll is the longest pause between two reads of the log with
	// inotify: a write to the log the watch missed costs at most this much.
	readyPoll = 2 * time.Millisecond
	// readyDial is the longest pause between two dials with inotify.
	readyDial = 25 * time.Millisecond
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
