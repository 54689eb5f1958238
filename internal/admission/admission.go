// Package admission decides whether the server takes on one more piece of
// heavy work (a sandbox create, resume or fork) now, after a short wait, or
// not at all. Without it a burst of requests all start at once, every one of
// them gets slow, the database gives up under contention and clients time
// out while the server keeps working for them. With it a server runs at most
// Concurrency operations, lets at most Queue more wait for a slot, and
// answers everything beyond that at once: "too many requests, retry after"
// (errdefs.ErrResourceExhausted, HTTP 429), or, when the host has no room
// for one more sandbox, "unavailable" (errdefs.ErrUnavailable, HTTP 503).
// A waiting request whose client went away leaves the queue.
package admission

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
)

// Config bounds the work a server takes on.
type Config struct {
	Concurrency int           // operations running at once (default DefaultConcurrency)
	Queue       int           // operations waiting for a slot (default 4 × Concurrency; -1 = none)
	MaxWait     time.Duration // longest wait for a slot before 429 (default 30 s)
	RetryAfter  time.Duration // Retry-After sent with 429 (default 1 s)
	// Room reports whether the host can hold one more sandbox needing the
	// given reservation (asked only for a non-zero Need); nil means always.
	// It is asked when an operation's turn comes.
	Room func(Need) error
}

// DefaultConcurrency is the number of creates run at once unless
// configured: measured on a 2-core host, more in parallel does not raise
// creates per second (the work is CPU-bound mount, network and process
// set-up), it only makes each one slower.
const DefaultConcurrency = 4

// Need is what one operation reserves on the host.
type Need struct {
	MemoryMiB int
	DiskMiB   int
}

// Controller admits operations. The zero value is not usable; see New.
type Controller struct {
	cfg   Config
	slots chan struct{} // buffered Concurrency: a token held per running op

	mu      sync.Mutex
	waiting int // guarded by mu
}

// New returns a Controller for cfg, filling defaults.
func New(cfg Config) *Controller {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	switch {
	case cfg.Queue == 0:
		cfg.Queue = 4 * cfg.Concurrency
	case cfg.Queue < 0:
		cfg.Queue = 0
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 30 * time.Second
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = time.Second
	}
	return &Controller{cfg: cfg, slots: make(chan struct{}, cfg.Concurrency)}
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

// Admit waits for a slot for op (a word for messages, e.g. "create") and
// returns the function that frees it; call it exactly once when the
// operation has finished, failed or was abandoned. Errors: a RetryError
// wrapping ErrResourceExhausted when the queue is full or the wait was too
// long; one wrapping ErrUnavailable when Room refuses; ctx's error when the
// caller gave up while waiting.
func (c *Controller) Admit(ctx context.Context, op string, need Need) (release func(), err error) {
	select {
	case c.slots <- struct{}{}:
	default:
		if err := c.wait(ctx, op); err != nil {
			return nil, err
		}
	}
	var once sync.Once
	release = func() { once.Do(func() { <-c.slots }) }
	if c.cfg.Room != nil && need != (Need{}) {
		if err := c.cfg.Room(need); err != nil {
			release()
			return nil, &RetryError{After: 5 * c.cfg.RetryAfter,
				Err: fmt.Errorf("%s: the host has no room for another sandbox (%w): %w", op, err, errdefs.ErrUnavailable)}
		}
	}
	return release, nil
}

// wait queues for a slot, if the queue has room.
func (c *Controller) wait(ctx context.Context, op string) error {
	c.mu.Lock()
	if c.waiting >= c.cfg.Queue {
		c.mu.Unlock()
		return &RetryError{After: c.cfg.RetryAfter, Err: errdefs.Publicf(errdefs.ErrResourceExhausted, "%s: the server is at capacity (%d running, %d waiting); retry later", op, c.cfg.Concurrency, c.cfg.Queue)}
	}
	c.waiting++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.waiting--
		c.mu.Unlock()
	}()
	timer := time.NewTimer(c.cfg.MaxWait)
	defer timer.Stop()
	select {
	case c.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: gave up waiting for a slot: %w", op, ctx.Err())
	case <-timer.C:
		return &RetryError{After: c.cfg.RetryAfter, Err: errdefs.Publicf(errdefs.ErrResourceExhausted, "%s: no slot within %s; retry later", op, c.cfg.MaxWait)}
	}
}

// Stats is a point-in-time view for logs and metrics.
type Stats struct{ Running, Waiting int }

// Stats returns how many operations run and wait now.
func (c *Controller) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Running: len(c.slots), Waiting: c.waiting}
}
