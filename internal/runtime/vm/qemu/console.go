package qemu

import "bytes"

// Ring keeps the last len(buf) bytes written to it and counts the rest.
// Not safe for concurrent use.
type Ring struct {
	buf   []byte
	total int64 // bytes ever written
}

func NewRing(size int) *Ring { return &Ring{buf: make([]byte, size)} }

// Write implements io.Writer; it never fails.
func (r *Ring) Write(p []byte) (int, error) {
	n := len(p)
	if skip := n - len(r.buf); skip > 0 { // only the last len(buf) bytes stay
		r.total += int64(skip)
		p = p[skip:]
	}
	off := int(r.total % int64(len(r.buf)))
	k := copy(r.buf[off:], p)
	copy(r.buf, p[k:])
	r.total += int64(len(p))
	return n, nil
}

// held is how many bytes the ring holds.
func (r *Ring) held() int {
	if r.total < int64(len(r.buf)) {
		return int(r.total)
	}
	return len(r.buf)
}

// dropped is how many of the bytes written the ring no longer holds.
func (r *Ring) dropped() int64 { return r.total - int64(r.held()) }

// Tail returns (a copy of) the last n bytes held.
func (r *Ring) Tail(n int) []byte {
	h := r.held()
	if n > h {
		n = h
	}
	out := make([]byte, n)
	end := int(r.total % int64(len(r.buf))) // one past the newest byte
	start := end - n
	if start >= 0 {
		copy(out, r.buf[start:end])
		return out
	}
	k := copy(out, r.buf[len(r.buf)+start:])
	copy(out[k:], r.buf[:end])
	return out
}

// matcher finds a marker in a stream fed in chunks of any size, also when
// the marker is split across chunks, keeping at most len(marker)-1 bytes
// between chunks.
type matcher struct {
	marker  []byte
	carry   []byte // the last len(marker)-1 bytes seen (fewer at the start)
	scratch []byte
	found   bool
}

func newMatcher(marker string) *matcher {
	k := max(len(marker)-1, 0)
	return &matcher{marker: []byte(marker), carry: make([]byte, 0, k), scratch: make([]byte, 0, 2*k)}
}

// feed consumes p and reports whether the marker has been seen so far.
func (m *matcher) feed(p []byte) bool {
	if m.found || len(m.marker) == 0 {
		m.found = true
		return true
	}
	k := len(m.marker) - 1
	// A match straddling the boundary starts in carry and ends in p's
	// first k bytes.
	m.scratch = append(append(m.scratch[:0], m.carry...), p[:min(k, len(p))]...)
	if bytes.Contains(m.scratch, m.marker) || bytes.Contains(p, m.marker) {
		m.found = true
		return true
	}
	if len(p) >= k {
		m.carry = append(m.carry[:0], p[len(p)-k:]...)
	} else {
		m.scratch = append(append(m.scratch[:0], m.carry...), p...)
		m.carry = append(m.carry[:0], m.scratch[max(len(m.scratch)-k, 0):]...)
	}
	return false
}
