// Package kept decides how long a backend keeps the process of a paused
// sandbox (the microVM runtime's QEMU, stopped after its pause was saved,
// so that a resume soon after only continues it): at most max of them,
// each for at most ttl, the least recently paused released first when
// there are more. What keeping and releasing mean is the backend's; this
// package only holds IDs and timers.
package kept

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Set is a backend's kept IDs. Safe for concurrent use.
type Set struct {
	max     int
	ttl     time.Duration
	release func(ctx context.Context, id string)

	mu      sync.Mutex
	order   []string          // kept IDs, least recently added first; guarded by mu
	entries map[string]*entry // guarded by mu
	closed  bool              // guarded by mu
	wg      sync.WaitGroup    // releases in flight
}

// entry is one kept ID; its timer's function compares pointers, so an ID
// taken and added again is not released by the old timer.
type entry struct{ timer *time.Timer }

// New returns a Set that keeps at most max IDs for at most ttl each and
// hands those it lets go to release, each in its own goroutine.
func New(max int, ttl time.Duration, release func(ctx context.Context, id string)) *Set {
	return &Set{max: max, ttl: ttl, release: release, entries: map[string]*entry{}}
}

// Add keeps id and lets the oldest kept IDs beyond max go. It reports
// false, keeping nothing, when the Set keeps none (max 0) or is closed:
// then the caller releases id itself.
func (s *Set) Add(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.max <= 0 || s.closed {
		return false
	}
	s.removeLocked(id)
	e := &entry{}
	e.timer = time.AfterFunc(s.ttl, func() { s.expire(id, e) })
	s.entries[id] = e
	s.order = append(s.order, id)
	for len(s.order) > s.max {
		old := s.order[0]
		s.removeLocked(old)
		s.spawnLocked(old)
	}
	return true
}

// Take forgets id (it is resumed or killed): its release will not come.
// It reports whether id was kept.
func (s *Set) Take(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.removeLocked(id)
}

// Close lets every kept ID go, refuses later Adds and waits until every
// release, also those started before, has returned.
func (s *Set) Close() {
	s.mu.Lock()
	s.closed = true
	for len(s.order) > 0 {
		id := s.order[0]
		s.removeLocked(id)
		s.spawnLocked(id)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// expire lets id go once its ttl is over, unless it was taken since.
func (s *Set) expire(id string, e *entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.entries[id] != e {
		return
	}
	s.removeLocked(id)
	s.spawnLocked(id)
}

func (s *Set) removeLocked(id string) bool {
	e, ok := s.entries[id]
	if !ok {
		return false
	}
	e.timer.Stop()
	delete(s.entries, id)
	s.order = slices.DeleteFunc(s.order, func(x string) bool { return x == id })
	return true
}

func (s *Set) spawnLocked(id string) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.release(context.Background(), id)
	}()
}
