package runtime

import "sync"

// Boxes maps sandbox IDs to a backend's per-sandbox bookkeeping T (which
// usually carries the mutex serialising Create and Kill of that ID). The
// zero value is ready to use; it is safe for concurrent use.
type Boxes[T any] struct {
	mu sync.Mutex
	m  map[string]*T // guarded by mu
}

// Get returns id's entry, adding a zero one when there is none.
func (b *Boxes[T]) Get(id string) *T {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.m[id]
	if !ok {
		if b.m == nil {
			b.m = map[string]*T{}
		}
		v = new(T)
		b.m[id] = v
	}
	return v
}

// Lookup returns id's entry, if any.
func (b *Boxes[T]) Lookup(id string) (*T, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.m[id]
	return v, ok
}

// Forget removes id's entry if it is still v (a later Get may have
// replaced it).
func (b *Boxes[T]) Forget(id string, v *T) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m[id] == v {
		delete(b.m, id)
	}
}
