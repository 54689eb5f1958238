// Package slots keeps the sandboxes a backend makes ahead of the request,
// per key (the microVM runtime's: a QEMU waiting for its template's
// snapshot; the container runtime's: a container created, its process not
// yet started; both per template build and size): which are idle, which are being
// made, which keys were created last, and the background refills and
// evictions. What a slot is, and how it is made and killed, is the
// backend's; this package only holds IDs.
package slots

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// Set is a backend's slots. Safe for concurrent use.
type Set struct {
	log     *slog.Logger
	kill    func(ctx context.Context, id string) error
	maxKeys int
	delay   time.Duration // from a Refill to the start of its makes

	mu     sync.Mutex
	want   int                  // idle slots per key; guarded by mu
	free   map[string][]string  // key → idle slot IDs; guarded by mu
	making map[string]int       // key → slots being made; guarded by mu
	used   map[string]time.Time // key → its last Refill; guarded by mu
	closed bool                 // guarded by mu
	wg     sync.WaitGroup       // refills and evictions in flight
}

// New returns a Set that keeps want idle slots for each of at most maxKeys
// keys (the least recently refilled keys lose theirs), starts making them
// delay after the Refill that asks (so that they do not share the CPU with
// the first requests to the sandbox just created) and kills slots with
// kill.
func New(log *slog.Logger, want, maxKeys int, delay time.Duration, kill func(ctx context.Context, id string) error) *Set {
	return &Set{log: log, kill: kill, maxKeys: maxKeys, delay: delay, want: want,
		free: map[string][]string{}, making: map[string]int{}, used: map[string]time.Time{}}
}

// SetWant changes how many idle slots each key keeps (0: none are made).
func (s *Set) SetWant(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.want = n
}

// Take reserves an idle slot of key: it is the caller's from now on.
func (s *Set) Take(key string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := s.free[key]
	if len(ids) == 0 {
		return "", false
	}
	s.free[key] = ids[1:]
	return ids[0], true
}

// Count is how many idle slots key has.
func (s *Set) Count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.free[key])
}

// Idle lists every idle slot's ID, key by key.
func (s *Set) Idle() map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]string, len(s.free))
	for k, v := range s.free {
		if len(v) > 0 {
			out[k] = append([]string(nil), v...)
		}
	}
	return out
}

// Forget drops id from the idle slots, if it is one (it was killed).
func (s *Set) Forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, ids := range s.free {
		for i, v := range ids {
			if v == id {
				s.free[k] = append(ids[:i:i], ids[i+1:]...)
				return
			}
		}
	}
}

// Refill records a create of key and starts making, in the background
// with mk (which returns the new slot's ID), the idle slots key lacks.
// Keys beyond the Set's maximum lose their idle slots first, least
// recently refilled first.
func (s *Set) Refill(key string, mk func(ctx context.Context) (string, error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.want <= 0 {
		return
	}
	s.used[key] = time.Now()
	if evicted := s.evictLocked(key); len(evicted) > 0 {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.killAll(context.Background(), evicted)
		}()
	}
	for len(s.free[key])+s.making[key] < s.want {
		s.making[key]++
		s.wg.Add(1)
		go s.make(key, mk)
	}
}

// make runs one mk for key and files its slot (killed at once when the
// Set closed meanwhile).
func (s *Set) make(key string, mk func(ctx context.Context) (string, error)) {
	defer s.wg.Done()
	time.Sleep(s.delay)
	id, err := mk(context.Background())
	s.mu.Lock()
	s.making[key]--
	closed := s.closed
	if err == nil && !closed {
		s.free[key] = append(s.free[key], id)
	}
	s.mu.Unlock()
	switch {
	case err != nil:
		s.log.Warn("slot not made", "key", key, "err", err)
	case closed:
		s.killAll(context.Background(), []string{id})
	}
}

// evictLocked takes the idle slots of the least recently refilled keys
// other than keep off the Set until fewer than maxKeys keys have slots,
// and returns their IDs; mu is held.
func (s *Set) evictLocked(keep string) []string {
	var out []string
	for {
		n, lru := 0, ""
		for k := range s.used {
			if k == keep || len(s.free[k])+s.making[k] == 0 {
				continue
			}
			n++
			if len(s.free[k]) > 0 && (lru == "" || s.used[k].Before(s.used[lru])) {
				lru = k
			}
		}
		if n < s.maxKeys || lru == "" {
			return out
		}
		out = append(out, s.free[lru]...)
		delete(s.free, lru)
	}
}

// Drop kills the idle slots of the keys that match (and forgets when
// those keys were used).
func (s *Set) Drop(ctx context.Context, match func(key string) bool) error {
	var ids []string
	s.mu.Lock()
	for k, v := range s.free {
		if match(k) {
			ids = append(ids, v...)
			delete(s.free, k)
		}
	}
	for k := range s.used {
		if match(k) {
			delete(s.used, k)
		}
	}
	s.mu.Unlock()
	return s.killAll(ctx, ids)
}

// Close stops making slots, waits for those being made and kills every
// idle one. Reserved slots are their callers'.
func (s *Set) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wg.Wait()
	return s.Drop(ctx, func(string) bool { return true })
}

// Reopen undoes Close (for tests that share one backend).
func (s *Set) Reopen() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = false
}

// Wait waits for the refills and evictions in flight.
func (s *Set) Wait() { s.wg.Wait() }

func (s *Set) killAll(ctx context.Context, ids []string) error {
	var errs []error
	for _, id := range ids {
		errs = append(errs, s.kill(ctx, id))
	}
	return errors.Join(errs...)
}
