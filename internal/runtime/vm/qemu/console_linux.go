package qemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// The guest's serial port is a unix socket QEMU listens on (console.sock
// in the sandbox directory, see machine.args). QEMU waits for Moat to
// connect before it runs anything, so no early output is lost; while
// nobody is connected (between a restart of Moat and Recover) it drops
// the output. Moat keeps the last ConsoleRing bytes in memory and mirrors
// the output to console.log, rotated to console.log.1 at ConsoleFileCap:
// whatever the guest writes, the host keeps at most ConsoleRing bytes in
// memory and 2×ConsoleFileCap on disk.
const (
	ConsoleRing    = 64 << 10
	ConsoleFileCap = 1 << 20
)

// Console reads one QEMU's serial port. Safe for concurrent use; its
// methods work on a nil *Console (a VM without a console socket), whose
// waits fail at once.
type Console struct {
	conn     net.Conn      // nil when following a file (FollowFile)
	stop     chan struct{} // FollowFile: closed by close
	stopOnce sync.Once
	done     chan struct{} // closed when the reader stopped (QEMU quit or close)

	mu      sync.Mutex
	ring    *Ring
	watches map[*Watch]struct{}
	mirror  *os.File // nil: no mirror
	path    string   // mirror path
	size    int64    // bytes in the current mirror file
}

// Watch is one wait for a marker; see console.watch.
type Watch struct {
	c      *Console
	marker string
	m      *matcher
	found  chan struct{}
}

// DialConsole connects to the console socket at sock, retrying while QEMU
// starts (alive reports whether it still runs), and mirrors to mirror
// (empty: no mirror).
func DialConsole(ctx context.Context, sock, mirror string, alive func() bool) (*Console, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var d net.Dialer
	for {
		ref, release, err := sockRef(sock) // never through a symlink QEMU planted
		var conn net.Conn
		if err == nil {
			conn, err = d.DialContext(ctx, "unix", ref)
			release()
		}
		if err == nil {
			c := &Console{conn: conn, done: make(chan struct{}), ring: NewRing(ConsoleRing), watches: map[*Watch]struct{}{}, path: mirror}
			c.openMirror()
			go c.read()
			return c, nil
		}
		if !alive() {
			return nil, fmt.Errorf("console %s: qemu exited: %w", sock, err)
		}
		if serr := Sleep(ctx, 5*time.Millisecond); serr != nil {
			return nil, fmt.Errorf("console %s: %w (last: %v)", sock, serr, err)
		}
	}
}

// openMirror starts a new mirror file. Only root writes it: a file or
// symlink of that name left by QEMU (which can create files in the
// sandbox directory) is removed first and never followed. c.mu is held or
// the reader has not started.
func (c *Console) openMirror() {
	if c.path == "" {
		return
	}
	_ = os.Remove(c.path)
	f, err := os.OpenFile(c.path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW, 0o640)
	if err != nil {
		c.path = "" // the in-memory ring still works
		return
	}
	c.mirror, c.size = f, 0
}

// read copies the socket into the ring, the watches and the mirror until
// QEMU closes it.
func (c *Console) read() {
	defer close(c.done)
	buf := make([]byte, 32<<10)
	for {
		n, err := c.conn.Read(buf)
		if n > 0 {
			c.consume(buf[:n])
		}
		if err != nil {
			c.mu.Lock()
			if c.mirror != nil {
				c.mirror.Close()
				c.mirror = nil
			}
			c.mu.Unlock()
			return
		}
	}
}

func (c *Console) consume(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, _ = c.ring.Write(p)
	for w := range c.watches {
		if w.m.feed(p) {
			close(w.found)
			delete(c.watches, w)
		}
	}
	if c.mirror == nil {
		return
	}
	if c.size+int64(len(p)) > ConsoleFileCap {
		c.mirror.Close()
		c.mirror = nil
		_ = os.Rename(c.path, c.path+".1")
		c.openMirror()
		if c.mirror == nil {
			return
		}
	}
	if n, err := c.mirror.Write(p); err == nil {
		c.size += int64(n)
	}
}

// Watch starts looking for marker in the output from now on: call it
// before the event that prints marker, then wait.
func (c *Console) Watch(marker string) *Watch {
	w := &Watch{c: c, marker: marker, m: newMatcher(marker), found: make(chan struct{})}
	if c == nil {
		return w
	}
	c.mu.Lock()
	c.watches[w] = struct{}{}
	c.mu.Unlock()
	return w
}

// Wait blocks until the marker showed, the console closed, ctx ended or
// timeout passed.
func (w *Watch) Wait(ctx context.Context, timeout time.Duration) error {
	if w.c == nil {
		return fmt.Errorf("console never showed %q: no console connection", w.marker)
	}
	defer w.Stop()
	t := time.NewTimer(timeout)
	defer t.Stop()
	var err error
	select {
	case <-w.found:
		return nil
	case <-w.c.done:
		select {
		case <-w.found:
			return nil
		default:
		}
		err = errors.New("console closed (qemu quit)")
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = context.DeadlineExceeded
	}
	return fmt.Errorf("console never showed %q: %w (console: %q)", w.marker, err, w.c.Tail(1024))
}

// Stop forgets the watch.
func (w *Watch) Stop() {
	if w.c == nil {
		return
	}
	w.c.mu.Lock()
	delete(w.c.watches, w)
	w.c.mu.Unlock()
}

// Tail is the last n bytes of the output, for error messages.
func (c *Console) Tail(n int) string {
	if c == nil {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.ring.Tail(n))
}

// Stats reports the bytes read so far and how many of them the ring no
// longer holds.
func (c *Console) Stats() (total, dropped int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ring.total, c.ring.dropped()
}

// Close disconnects (QEMU drops the output from then on) and waits for
// the reader to stop.
func (c *Console) Close() {
	if c == nil {
		return
	}
	if c.conn != nil {
		c.conn.Close()
	} else {
		c.stopOnce.Do(func() { close(c.stop) })
	}
	<-c.done
}

// Reconnect connects to the serial port (console.sock) of a running QEMU
// of sandbox directory dir again (QEMU dropped the output while nobody
// listened), or follows its console.log when it has none (a QEMU started
// by an older version). alive is the QEMU process's.
func Reconnect(ctx context.Context, dir string, alive func() bool) (*Console, error) {
	sock, log := filepath.Join(dir, "console.sock"), filepath.Join(dir, "console.log")
	if _, err := os.Lstat(sock); err != nil {
		return FollowFile(log, alive)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return DialConsole(ctx, sock, log, alive)
}

// FollowFile follows the serial output file that QEMUs started by older
// versions (-serial file:) write, from its current end, in constant
// memory: for VMs adopted across an upgrade, until their next pause moves
// them to a console socket.
func FollowFile(path string, alive func() bool) (*Console, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("console file: %w", err)
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return nil, fmt.Errorf("console file: %w", err)
	}
	c := &Console{stop: make(chan struct{}), done: make(chan struct{}), ring: NewRing(ConsoleRing), watches: map[*Watch]struct{}{}}
	go c.poll(f, alive)
	return c, nil
}

// poll reads what is appended to f until QEMU exits or close.
func (c *Console) poll(f *os.File, alive func() bool) {
	defer close(c.done)
	defer f.Close()
	buf := make([]byte, 32<<10)
	for {
		n, _ := f.Read(buf)
		if n > 0 {
			c.consume(buf[:n])
			continue
		}
		if !alive() {
			return
		}
		select {
		case <-c.stop:
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}
