// Package admission decides whether the server takes on one more piece of
// heavy work (a sandbox create, resume, pause, snapshot or pool refill)
// now, after a wait in a queue, or not at all. Without it a burst of
// requests all start at once, every one of them gets slow, the database
// gives up under contention and clients time out while the server keeps
// working for them.
//
// With it a server runs at most Concurrency operations and queues the
// rest, fairly: each team has its own line and the lines take turns, so one
// team's burst cannot starve another's requests; warm-pool refills
// (Background) go only when no request waits. A request waits as long as
// the queue ahead of it is expected to clear within MaxWait (or the
// client's own deadline, when its context has one); the expectation comes
// from how long operations have been taking. A request that would wait
// longer, or finds Queue requests already waiting, is answered at once:
// "too many requests, retry after" (errdefs.ErrResourceExhausted, HTTP 429)
// with the expected wait as Retry-After. When its turn comes and the host
// has no room for one more sandbox, the answer is "unavailable"
// (errdefs.ErrUnavailable, HTTP 503). A waiting request whose client went
// away leaves the queue.
package admission

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
)

// Config bounds the work a server takes on.
type Config struct {
	Concurrency int // operations running at once (default DefaultConcurrency)
	// Queue bounds the requests waiting at once (default DefaultQueue; -1:
	// none wait). The usual bound is MaxWait's; this one bounds memory.
	Queue int
	// MaxWait is the longest a request is expected to wait for its turn
	// (default DefaultMaxWait); a client's earlier deadline shortens it.
	MaxWait    time.Duration
	RetryAfter time.Duration // the least Retry-After sent with 429 (default 1 s)
	// Room reports whether the host can hold one more sandbox needing the
	// given reservation (asked only for a non-zero Need); nil means always.
	// It is asked when an operation's turn comes.
	Room func(Need) error
}

// Defaults of Config.
const (
	DefaultQueue   = 1024
	DefaultMaxWait = 60 * time.Second
)

// DefaultConcurrency is the number of operations run at once unless
// configured: two per CPU the process may use. A create is mostly CPU-bound
// mount, network and process set-up with short waits on the kernel in
// between, so about one per core keeps the cores busy and a second covers
// the waits; measured on a 2-core host, 2, 4 and 8 at once gave a burst
// of 100 creates medians of 1.00–1.13, 0.93–1.12 and 1.07–1.26 s: more
// only make each one slower.
var DefaultConcurrency = 2 * runtime.GOMAXPROCS(0)

// firstEstimate is the expected length of an operation before any has
// finished.
const firstEstimate = time.Second

// Need is what one operation reserves on the host.
type Need struct {
	MemoryMiB int
	DiskMiB   int
}

// Request is one operation asking to run.
type Request struct {
	Op   string // a word for messages, e.g. "create"
	Team string // whose line it waits in
	Need Need
	// Background work (warm-pool refills) runs only when no other request
	// waits.
	Background bool
}

// Controller admits operations. The zero value is not usable; see New.
type Controller struct {
	cfg Config

	mu      sync.Mutex
	running int                  // guarded by mu
	bgRun   int                  // background operations running
	lines   map[string][]*waiter // per team, oldest first; "" background
	turns   []string             // teams with a line, in the order they take turns
	next    int                  // index into turns of the team served next
	waiting int                  // foreground waiters
	bg      []*waiter            // background waiters, oldest first
	avg     time.Duration        // moving average of an operation's length
	refused Refusals             // guarded by mu
}

// waiter is one queued request; ready closes when it got a slot.
type waiter struct {
	team       string
	background bool
	ready      chan struct{}
	granted    bool
}

// maxBackground is how many background operations run at once: at most
// half the slots, so that a request never waits behind refills alone.
func (c *Controller) maxBackground() int { return max(1, c.cfg.Concurrency/2) }

// New returns a Controller for cfg, filling defaults.
func New(cfg Config) *Controller {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	switch {
	case cfg.Queue == 0:
		cfg.Queue = DefaultQueue
	case cfg.Queue < 0:
		cfg.Queue = 0
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = time.Second
	}
	return &Controller{cfg: cfg, lines: map[string][]*waiter{}, avg: firstEstimate}
}

// Config returns the configuration in force (defaults filled).
func (c *Controller) Config() Config { return c.cfg }

// RetryError is a refusal that tells the client when to try again.
type RetryError struct {
	After time.Duration
	Err   error
}

func (e *RetryError) Error() string { return e.Err.Error() }
func (e *RetryError) Unwrap() error { return e.Err }

// RetryAfter is when the client may try again (the Retry-After header).
func (e *RetryError) RetryAfter() time.Duration { return e.After }

// Admit waits for r's turn and returns the function that frees its slot;
// call it exactly once when the operation has finished, failed or was
// abandoned. Errors: a RetryError wrapping ErrResourceExhausted when the
// wait would be too long or the queue is full; one wrapping ErrUnavailable
// when Room refuses; ctx's error when the caller gave up while waiting.
func (c *Controller) Admit(ctx context.Context, r Request) (release func(), err error) {
	if err := c.wait(ctx, r); err != nil {
		return nil, err
	}
	start := time.Now()
	var once sync.Once
	release = func() { once.Do(func() { c.done(time.Since(start), r.Background) }) }
	if c.cfg.Room != nil && r.Need != (Need{}) {
		if err := c.cfg.Room(r.Need); err != nil {
			release()
			c.mu.Lock()
			c.refused.Room++
			c.mu.Unlock()
			return nil, &RetryError{After: 5 * c.cfg.RetryAfter, Err: errdefs.WithCode(fmt.Errorf(
				"%s: the host has no room for another sandbox (%w): %w", r.Op, err, errdefs.ErrUnavailable), errdefs.CodeCapacityUnavailable)}
		}
	}
	return release, nil
}

// wait returns once r holds a slot: at once when one is free and nobody
// waits, else after its turn in the queue.
func (c *Controller) wait(ctx context.Context, r Request) error {
	c.mu.Lock()
	if err := c.refuse(ctx, r); err != nil {
		c.mu.Unlock()
		return err
	}
	w := &waiter{team: r.Team, background: r.Background, ready: make(chan struct{})}
	c.enqueue(w)
	c.dispatch() // at once when a slot is free and nobody is ahead
	c.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		defer c.mu.Unlock()
		if w.granted { // the turn came as the client left: pass it on
			c.free(r.Background)
			c.dispatch()
		} else {
			c.remove(w)
		}
		return fmt.Errorf("%s: gave up waiting for a slot: %w", r.Op, ctx.Err())
	}
}

// refuse is the refusal of a request that would join the queue now, or
// nil when it may wait. Caller holds mu.
func (c *Controller) refuse(ctx context.Context, r Request) error {
	if r.Background {
		return nil // a refill waits for a quiet moment however long
	}
	if c.running < c.cfg.Concurrency && c.waiting == 0 {
		return nil // runs at once
	}
	if c.waiting >= c.cfg.Queue {
		c.refused.QueueFull++
		return &RetryError{After: c.retryAfter(c.expected(c.waiting)), Err: errdefs.WithCode(errdefs.Publicf(errdefs.ErrResourceExhausted,
			"%s: the server is at capacity (%d running, %d waiting); retry later", r.Op, c.running, c.waiting), errdefs.CodeCapacityUnavailable)}
	}
	budget := c.cfg.MaxWait
	if dl, ok := ctx.Deadline(); ok {
		budget = min(budget, time.Until(dl))
	}
	if exp := c.expected(c.ahead(r.Team) + 1); exp > budget {
		c.refused.Wait++
		return &RetryError{After: c.retryAfter(exp - budget), Err: errdefs.WithCode(errdefs.Publicf(errdefs.ErrResourceExhausted,
			"%s: the server is at capacity (%d running, %d waiting, about %s to wait, more than %s); retry later",
			r.Op, c.running, c.waiting, exp.Round(100*time.Millisecond), budget.Round(100*time.Millisecond)), errdefs.CodeCapacityUnavailable)}
	}
	return nil
}

// ahead is how many waiting requests are served before a new one of
// team: its team's line, and from every other line as many as take turns
// before it (the lines alternate). Caller holds mu.
func (c *Controller) ahead(team string) int {
	k := len(c.lines[team])
	n := k
	for t, line := range c.lines {
		if t != team {
			n += min(len(line), k+1)
		}
	}
	return n
}

// expected is how long the n-th request in the queue is expected to wait:
// the queue clears Concurrency operations per average operation.
// Caller holds mu.
func (c *Controller) expected(n int) time.Duration {
	rounds := (n + c.cfg.Concurrency - 1) / c.cfg.Concurrency
	return time.Duration(rounds) * c.avg
}

func (c *Controller) retryAfter(d time.Duration) time.Duration {
	return max(c.cfg.RetryAfter, d.Round(time.Second))
}

// enqueue puts w at the end of its team's line (or the background line).
// Caller holds mu.
func (c *Controller) enqueue(w *waiter) {
	if w.background {
		c.bg = append(c.bg, w)
		return
	}
	if len(c.lines[w.team]) == 0 {
		c.turns = append(c.turns, w.team)
	}
	c.lines[w.team] = append(c.lines[w.team], w)
	c.waiting++
}

// remove takes an abandoned w out of its line. Caller holds mu.
func (c *Controller) remove(w *waiter) {
	if w.background {
		c.bg = without(c.bg, w)
		return
	}
	c.lines[w.team] = without(c.lines[w.team], w)
	c.waiting--
	if len(c.lines[w.team]) == 0 {
		c.dropTurn(w.team)
	}
}

func without(ws []*waiter, w *waiter) []*waiter {
	for i, x := range ws {
		if x == w {
			return append(ws[:i:i], ws[i+1:]...)
		}
	}
	return ws
}

// dropTurn removes team from the rotation, keeping whose turn is next.
// Caller holds mu.
func (c *Controller) dropTurn(team string) {
	for i, t := range c.turns {
		if t != team {
			continue
		}
		c.turns = append(c.turns[:i:i], c.turns[i+1:]...)
		delete(c.lines, team)
		if i < c.next {
			c.next--
		}
		if c.next >= len(c.turns) {
			c.next = 0
		}
		return
	}
}

// done frees a slot after an operation of length d and hands it on.
func (c *Controller) done(d time.Duration, background bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.free(background)
	if !background {
		c.avg = (c.avg*7 + d) / 8 // moving average: recent operations count most
	}
	c.dispatch()
}

// free gives back a slot. Caller holds mu.
func (c *Controller) free(background bool) {
	c.running--
	if background {
		c.bgRun--
	}
}

// dispatch gives free slots to waiters: teams in turn, then background.
// Caller holds mu.
func (c *Controller) dispatch() {
	for c.running < c.cfg.Concurrency {
		var w *waiter
		switch {
		case len(c.turns) > 0:
			team := c.turns[c.next]
			line := c.lines[team]
			w, c.lines[team] = line[0], line[1:]
			c.waiting--
			if len(c.lines[team]) == 0 {
				c.dropTurn(team)
			} else {
				c.next = (c.next + 1) % len(c.turns)
			}
		case len(c.bg) > 0 && c.bgRun < c.maxBackground():
			w, c.bg = c.bg[0], c.bg[1:]
			c.bgRun++
		default:
			return
		}
		c.running++
		w.granted = true
		close(w.ready)
	}
}

// Stats is a point-in-time view for logs and metrics.
type Stats struct{ Running, Waiting int }

// Stats returns how many operations run and wait now (background
// waiters included).
func (c *Controller) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Running: c.running, Waiting: c.waiting + len(c.bg)}
}

// Refusals counts the requests refused since New, by reason.
type Refusals struct {
	QueueFull uint64 // 429: Queue requests were already waiting
	Wait      uint64 // 429: the expected wait was longer than MaxWait or the client's deadline
	Room      uint64 // 503: Room refused when the turn came
}

// Refusals returns the refusals so far (for metrics).
func (c *Controller) Refusals() Refusals {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refused
}
