// Package qmp is a small client for the QEMU Machine Protocol: it connects to
// a QMP unix socket, negotiates capabilities, runs commands (optionally
// passing a file descriptor with SCM_RIGHTS) and collects asynchronous events.
package qmp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

// Error is an error reply from QEMU.
type Error struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *Error) Error() string { return "qmp: " + e.Class + ": " + e.Desc }

// Event is an asynchronous QMP event.
type Event struct {
	Name string          `json:"event"`
	Data json.RawMessage `json:"data"`
	Time time.Time       `json:"-"`
}

// ErrClosed is returned for commands on a closed connection or one QEMU
// closed (it quit or died).
var ErrClosed = errors.New("qmp: connection closed")

// maxEvents bounds the events kept in memory.
const maxEvents = 256

// Client is a QMP connection. Safe for concurrent use.
type Client struct {
	conn *net.UnixConn

	wmu sync.Mutex // serialises writes

	mu      sync.Mutex
	nextID  uint64                   // guarded by mu
	pending map[string]chan response // guarded by mu
	events  []Event                  // guarded by mu
	evCh    chan struct{}            // closed and replaced on each event; guarded by mu
	err     error                    // set once the reader stops; guarded by mu
	done    chan struct{}            // closed when the reader stops
}

type response struct {
	Return json.RawMessage `json:"return"`
	Error  *Error          `json:"error"`
	ID     string          `json:"id"`
	Event  string          `json:"event"`
	Data   json.RawMessage `json:"data"`
	QMP    json.RawMessage `json:"QMP"`
	TS     *struct {
		Seconds      int64 `json:"seconds"`
		Microseconds int64 `json:"microseconds"`
	} `json:"timestamp"`
}

// Dial connects to the QMP socket at path, retrying until ctx ends (QEMU
// creates the socket shortly after it starts), reads the greeting and
// enables commands with qmp_capabilities.
func Dial(ctx context.Context, path string) (*Client, error) {
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			cl, err := newClient(ctx, c.(*net.UnixConn))
			if err != nil {
				c.Close()
				return nil, err
			}
			return cl, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("qmp: dial %s: %w", path, errors.Join(err, ctx.Err()))
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func newClient(ctx context.Context, conn *net.UnixConn) (*Client, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(dl)
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("qmp: read greeting: %w", err)
	}
	var g response
	if err := json.Unmarshal(line, &g); err != nil || g.QMP == nil {
		return nil, fmt.Errorf("qmp: bad greeting %q", line)
	}
	_ = conn.SetReadDeadline(time.Time{})
	c := &Client{conn: conn, pending: map[string]chan response{}, evCh: make(chan struct{}), done: make(chan struct{})}
	go c.read(br)
	if err := c.Execute(ctx, "qmp_capabilities", nil, nil); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// read dispatches replies to waiting commands and stores events until the
// connection ends.
func (c *Client) read(br *bufio.Reader) {
	dec := json.NewDecoder(br)
	var err error
	for {
		var r response
		if err = dec.Decode(&r); err != nil {
			break
		}
		c.mu.Lock()
		switch {
		case r.Event != "":
			ev := Event{Name: r.Event, Data: r.Data, Time: time.Now()}
			if r.TS != nil {
				ev.Time = time.Unix(r.TS.Seconds, r.TS.Microseconds*1000)
			}
			c.events = append(c.events, ev)
			if len(c.events) > maxEvents {
				c.events = c.events[len(c.events)-maxEvents:]
			}
			close(c.evCh)
			c.evCh = make(chan struct{})
		default:
			if ch, ok := c.pending[r.ID]; ok {
				delete(c.pending, r.ID)
				ch <- r
			}
		}
		c.mu.Unlock()
	}
	c.mu.Lock()
	c.err = errors.Join(ErrClosed, err)
	for id, ch := range c.pending {
		delete(c.pending, id)
		close(ch)
	}
	c.mu.Unlock()
	close(c.done)
}

// Execute runs command with args (nil for none) and decodes the "return"
// value into out (nil to ignore it). QEMU's error replies come back as *Error.
func (c *Client) Execute(ctx context.Context, command string, args, out any) error {
	return c.ExecuteFile(ctx, command, args, out, nil)
}

// ExecuteFile is Execute that also passes f's descriptor with the command
// (SCM_RIGHTS), as getfd and add-fd expect.
func (c *Client) ExecuteFile(ctx context.Context, command string, args, out any, f *os.File) error {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return fmt.Errorf("qmp %s: %w", command, err)
	}
	c.nextID++
	id := strconv.FormatUint(c.nextID, 10)
	ch := make(chan response, 1)
	c.pending[id] = ch
	c.mu.Unlock()

	req := map[string]any{"execute": command, "id": id}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		c.forget(id)
		return fmt.Errorf("qmp %s: %w", command, err)
	}
	if err := c.write(append(b, '\n'), f); err != nil {
		c.forget(id)
		return fmt.Errorf("qmp %s: %w", command, err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return fmt.Errorf("qmp %s: %w", command, ErrClosed)
		}
		if r.Error != nil {
			return fmt.Errorf("qmp %s: %w", command, r.Error)
		}
		if out != nil && r.Return != nil {
			if err := json.Unmarshal(r.Return, out); err != nil {
				return fmt.Errorf("qmp %s: decode reply: %w", command, err)
			}
		}
		return nil
	case <-ctx.Done():
		c.forget(id)
		return fmt.Errorf("qmp %s: %w", command, ctx.Err())
	}
}

func (c *Client) forget(id string) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

func (c *Client) write(b []byte, f *os.File) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if f == nil {
		_, err := c.conn.Write(b)
		return err
	}
	rights := unixRights(int(f.Fd()))
	n, _, err := c.conn.WriteMsgUnix(b, rights, nil)
	if err == nil && n < len(b) {
		_, err = c.conn.Write(b[n:])
	}
	return err
}

// Events returns the events received so far (the last maxEvents).
func (c *Client) Events() []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Event(nil), c.events...)
}

// WaitEvent blocks until an event called name arrives at or after since, the
// connection ends, or ctx ends.
func (c *Client) WaitEvent(ctx context.Context, name string, since time.Time) (Event, error) {
	for {
		c.mu.Lock()
		for _, ev := range c.events {
			if ev.Name == name && !ev.Time.Before(since) {
				c.mu.Unlock()
				return ev, nil
			}
		}
		ch, err := c.evCh, c.err
		c.mu.Unlock()
		if err != nil {
			return Event{}, fmt.Errorf("qmp: wait for %s: %w", name, err)
		}
		select {
		case <-ch:
		case <-c.done:
		case <-ctx.Done():
			return Event{}, fmt.Errorf("qmp: wait for %s: %w", name, ctx.Err())
		}
	}
}

// Done is closed when the connection ends.
func (c *Client) Done() <-chan struct{} { return c.done }

// Close closes the connection; pending commands fail with ErrClosed.
func (c *Client) Close() error {
	err := c.conn.Close()
	<-c.done
	return err
}
