package kept

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// recorder collects released IDs.
type recorder struct {
	mu  sync.Mutex
	ids []string
	ch  chan string
}

func newRecorder() *recorder { return &recorder{ch: make(chan string, 16)} }

func (r *recorder) release(_ context.Context, id string) {
	r.mu.Lock()
	r.ids = append(r.ids, id)
	r.mu.Unlock()
	r.ch <- id
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.ids)
	slices.Sort(out)
	return out
}

func (r *recorder) next(t *testing.T) string {
	t.Helper()
	select {
	case id := <-r.ch:
		return id
	case <-time.After(5 * time.Second):
		t.Fatal("no release")
		return ""
	}
}

// expect fails unless the next release is of want.
func (r *recorder) expect(t *testing.T, what, want string) {
	t.Helper()
	if id := r.next(t); id != want {
		t.Fatalf("%s %s, want %s", what, id, want)
	}
}

func TestSet(t *testing.T) {
	tests := []struct {
		name  string
		max   int
		steps func(s *Set) []bool // the Adds' results
		want  []string            // released by Close's end
	}{
		{"disabled", 0, func(s *Set) []bool { return []bool{s.Add("a")} }, nil},
		{"within max", 2, func(s *Set) []bool { return []bool{s.Add("a"), s.Add("b")} }, []string{"a", "b"}},
		{"oldest goes", 2, func(s *Set) []bool { return []bool{s.Add("a"), s.Add("b"), s.Add("c")} }, []string{"a", "b", "c"}},
		{"taken is not released", 2, func(s *Set) []bool {
			r := []bool{s.Add("a"), s.Add("b")}
			if !s.Take("a") || s.Take("a") || s.Take("zz") {
				panic("Take")
			}
			return r
		}, []string{"b"}},
		{"added again counts once", 2, func(s *Set) []bool { return []bool{s.Add("a"), s.Add("a"), s.Add("b")} }, []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder()
			s := New(tt.max, time.Hour, rec.release)
			added := tt.steps(s)
			for _, ok := range added {
				if ok != (tt.max > 0) {
					t.Fatalf("Add = %v with max %d", ok, tt.max)
				}
			}
			s.Close()
			if got := rec.got(); !slices.Equal(got, tt.want) {
				t.Fatalf("released %v, want %v", got, tt.want)
			}
			if s.Add("late") {
				t.Fatal("Add after Close kept an ID")
			}
		})
	}
}

func TestEvictsLeastRecent(t *testing.T) {
	rec := newRecorder()
	s := New(2, time.Hour, rec.release)
	defer s.Close()
	s.Add("a")
	s.Add("b")
	s.Add("a") // a is now the most recent
	s.Add("c")
	rec.expect(t, "evicted", "b")
}

func TestExpires(t *testing.T) {
	rec := newRecorder()
	s := New(4, 20*time.Millisecond, rec.release)
	defer s.Close()
	s.Add("a")
	s.Add("b")
	s.Take("b")
	rec.expect(t, "expired", "a")
	noRelease(t, rec, "after Take")
	// Taken and added again: only the new timer counts.
	s.Add("c")
	s.Take("c")
	s.Add("c")
	rec.expect(t, "expired", "c")
	noRelease(t, rec, "twice")
}

// Close waits for releases started before it.
func TestCloseWaits(t *testing.T) {
	block := make(chan struct{})
	var done sync.WaitGroup
	done.Add(1)
	s := New(1, time.Hour, func(context.Context, string) { <-block; done.Done() })
	s.Add("a")
	s.Add("b") // a's release starts and blocks
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a release ran")
	case <-time.After(50 * time.Millisecond):
	}
	done.Add(1)
	close(block)
	<-closed
	done.Wait()
}

// noRelease fails if rec sees a release within 100 ms.
func noRelease(t *testing.T, rec *recorder, what string) {
	t.Helper()
	select {
	case id := <-rec.ch:
		t.Fatalf("%s released %s", id, what)
	case <-time.After(100 * time.Millisecond):
	}
}
