package qemu

import (
	"bytes"
	"strings"
	"testing"
)

func TestRing(t *testing.T) {
	for _, tc := range []struct {
		name        string
		size        int
		writes      []string
		wantTail    string // tail(size)
		wantDropped int64
	}{
		{"empty", 4, nil, "", 0},
		{"partial", 8, []string{"abc", "de"}, "abcde", 0},
		{"exactly full", 4, []string{"ab", "cd"}, "abcd", 0},
		{"wraps", 4, []string{"abc", "def"}, "cdef", 2},
		{"one big write", 4, []string{"0123456789"}, "6789", 6},
		{"big after small", 4, []string{"ab", "0123456"}, "3456", 5},
		{"many small", 3, []string{"a", "b", "c", "d", "e"}, "cde", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRing(tc.size)
			var all strings.Builder
			for _, w := range tc.writes {
				if n, err := r.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
				all.WriteString(w)
			}
			if got := string(r.Tail(tc.size)); got != tc.wantTail {
				t.Errorf("tail = %q, want %q", got, tc.wantTail)
			}
			if r.dropped() != tc.wantDropped || r.total != int64(all.Len()) {
				t.Errorf("dropped %d total %d, want %d %d", r.dropped(), r.total, tc.wantDropped, all.Len())
			}
			for n := 0; n <= len(tc.wantTail); n++ {
				if got := string(r.Tail(n)); got != tc.wantTail[len(tc.wantTail)-n:] {
					t.Errorf("tail(%d) = %q", n, got)
				}
			}
		})
	}
}

// TestRingMatchesReference writes pseudo-random chunk sizes and compares
// every tail with the stream's suffix.
func TestRingMatchesReference(t *testing.T) {
	r := NewRing(97)
	var all []byte
	seed := uint32(1)
	for i := 0; i < 2000; i++ {
		seed = seed*1664525 + 1013904223
		n := int(seed>>24) % 300
		chunk := bytes.Repeat([]byte{byte('a' + i%26)}, n)
		for j := range chunk {
			chunk[j] += byte(j % 3)
		}
		_, _ = r.Write(chunk)
		all = append(all, chunk...)
		want := all[max(len(all)-97, 0):]
		if got := r.Tail(97); !bytes.Equal(got, want) {
			t.Fatalf("after %d writes: tail %q, want %q", i, got, want)
		}
	}
	if r.dropped() != int64(len(all)-97) {
		t.Errorf("dropped %d, want %d", r.dropped(), len(all)-97)
	}
}

func TestMatcher(t *testing.T) {
	const marker = "moat-restored"
	for _, tc := range []struct {
		name   string
		chunks []string
		want   int // index of the chunk after which it is found; -1 never
	}{
		{"whole", []string{"xx moat-restored: ok"}, 0},
		{"later chunk", []string{"boot\n", "noise", "moat-restored"}, 2},
		{"split in two", []string{"junk moat-", "restored yes"}, 1},
		{"split everywhere", strings.Split("..moat-restored..", ""), 14},
		{"split over three", []string{"moa", "t-rest", "ored"}, 2},
		{"tiny chunks before", []string{"m", "o", "a", "x", "moat-restore", "d"}, 5},
		{"empty chunks", []string{"", "moat-re", "", "stored"}, 3},
		{"prefix only", []string{"moat-restore", "x"}, -1},
		{"false start then match", []string{"moat-remoat-", "restored"}, 1},
		{"absent", []string{"nothing", "here"}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMatcher(marker)
			got := -1
			for i, c := range tc.chunks {
				if m.feed([]byte(c)) && got < 0 {
					got = i
				}
			}
			if got != tc.want {
				t.Errorf("found after chunk %d, want %d", got, tc.want)
			}
			if cap(m.carry) > len(marker) || cap(m.scratch) > 2*len(marker) {
				t.Errorf("matcher grew: carry %d scratch %d", cap(m.carry), cap(m.scratch))
			}
		})
	}
}

// TestMatcherEverySplit feeds a stream with the marker at every offset and
// split at every point.
func TestMatcherEverySplit(t *testing.T) {
	const marker = "LINK-DOWN"
	for pre := 0; pre < 12; pre++ {
		stream := strings.Repeat("L", pre) + marker + "tail"
		for cut := 0; cut <= len(stream); cut++ {
			for cut2 := cut; cut2 <= len(stream); cut2++ {
				m := newMatcher(marker)
				m.feed([]byte(stream[:cut]))
				m.feed([]byte(stream[cut:cut2]))
				if !m.feed([]byte(stream[cut2:])) {
					t.Fatalf("pre %d cuts %d,%d: not found", pre, cut, cut2)
				}
			}
		}
	}
}
