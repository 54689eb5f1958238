package orchestratortest

import (
	"sort"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/orchestrator/clock"
)

var _ clock.Clock = (*Clock)(nil)

// Clock is a fake clock.Clock: time moves only by Advance, which
// runs the timers that fall due in the caller's goroutine, so timeout tests
// take no wall time.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer // guarded by mu
}

// NewClock returns a clock at a fixed instant.
func NewClock() *Clock {
	return &Clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// Now implements clock.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc implements clock.Clock; like time.AfterFunc, a timer
// already due fires at once, in its own goroutine.
func (c *Clock) AfterFunc(d time.Duration, f func()) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f}
	if d <= 0 {
		go f()
		return t // Stop: false, it fired
	}
	c.timers = append(c.timers, t)
	return t
}

// Advance moves time by d and runs every timer due by then, earliest
// first.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due, left []*fakeTimer
	for _, t := range c.timers {
		if !t.at.After(c.now) {
			due = append(due, t)
		} else {
			left = append(left, t)
		}
	}
	c.timers = left
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		t.f()
	}
}

// Pending is the number of timers not yet fired or stopped.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

type fakeTimer struct {
	c  *Clock
	at time.Time
	f  func()
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	for i, x := range t.c.timers {
		if x == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			return true
		}
	}
	return false
}
