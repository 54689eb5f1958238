package runtime

import (
	"fmt"
	"sync"
)

// Shared holds the host objects that every backend of one server process
// must share rather than each make its own: one network policy manager
// (addresses, nftables rules and the Recover of networks are host-wide).
// A nil *Shared shares nothing. Safe for concurrent use.
type Shared struct {
	mu sync.Mutex
	m  map[string]any // guarded by mu
}

// Get returns the object stored under key, making it with mk the first
// time; with a nil s it always calls mk. The caller asserts the type.
func (s *Shared) Get(key string, mk func() (any, error)) (any, error) {
	if s == nil {
		return mk()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.m[key]; ok {
		return v, nil
	}
	v, err := mk()
	if err != nil {
		return nil, fmt.Errorf("shared %s: %w", key, err)
	}
	if s.m == nil {
		s.m = map[string]any{}
	}
	s.m[key] = v
	return v, nil
}
