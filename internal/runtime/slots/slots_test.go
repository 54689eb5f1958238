package slots

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/testkit"
)

// fake makes slots "s1", "s2", ... and records kills.
type fake struct {
	mu     sync.Mutex
	n      int
	killed []string
	fail   error
	block  chan struct{} // when set, makes wait for it
}

func (f *fake) make(context.Context) (string, error) {
	if f.block != nil {
		<-f.block
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return "", f.fail
	}
	f.n++
	return fmt.Sprintf("s%d", f.n), nil
}

func (f *fake) kill(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.killed = append(f.killed, id)
	return nil
}

func (f *fake) kills() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(slices.Values(f.killed))
}

func newSet(want, keys int) (*Set, *fake) {
	f := &fake{}
	return New(slog.New(slog.NewTextHandler(io.Discard, nil)), want, keys, 0, f.kill), f
}

func TestRefillTakeForget(t *testing.T) {
	s, f := newSet(2, 4)
	s.Refill("a", f.make)
	s.Refill("a", f.make) // already being made: no more
	s.Wait()
	if n := s.Count("a"); n != 2 {
		t.Fatalf("idle = %d, want 2", n)
	}
	id, ok := s.Take("a")
	if !ok || s.Count("a") != 1 {
		t.Fatalf("Take = %q %v, idle %d", id, ok, s.Count("a"))
	}
	if _, ok := s.Take("b"); ok {
		t.Fatal("Take of a key with no slots")
	}
	s.Forget(s.Idle()["a"][0])
	if s.Count("a") != 0 {
		t.Fatal("Forget left the slot idle")
	}
	s.Refill("a", f.make)
	s.Wait()
	if s.Count("a") != 2 || f.n != 4 {
		t.Fatalf("after a refill: idle %d, made %d", s.Count("a"), f.n)
	}
	s.SetWant(0)
	s.Refill("b", f.make)
	s.Wait()
	if s.Count("b") != 0 {
		t.Fatal("made slots with want 0")
	}
}

func TestFailedMake(t *testing.T) {
	s, f := newSet(1, 4)
	f.fail = errors.New("no")
	s.Refill("a", f.make)
	s.Wait()
	if s.Count("a") != 0 {
		t.Fatal("a failed make left a slot")
	}
	f.fail = nil
	s.Refill("a", f.make) // not counted as being made any more
	s.Wait()
	if s.Count("a") != 1 {
		t.Fatal("no slot after a failed one")
	}
}

// The least recently refilled keys lose their idle slots beyond the
// maximum; reserved slots are not the Set's.
func TestEviction(t *testing.T) {
	s, f := newSet(1, 2)
	for _, k := range []string{"a", "b"} {
		s.Refill(k, f.make)
		s.Wait()
		time.Sleep(time.Millisecond) // a, then b: refills at distinct times
	}
	taken, _ := s.Take("b")
	s.Refill("b", f.make) // b is now the most recent, a the least
	s.Wait()
	s.Refill("c", f.make)
	s.Wait()
	if s.Count("a") != 0 || s.Count("b") != 1 || s.Count("c") != 1 {
		t.Fatalf("idle a %d b %d c %d; want 0 1 1", s.Count("a"), s.Count("b"), s.Count("c"))
	}
	if k := f.kills(); !slices.Equal(k, []string{"s1"}) || slices.Contains(k, taken) {
		t.Fatalf("killed %v, want a's s1 only", k)
	}
}

func TestDropAndClose(t *testing.T) {
	s, f := newSet(1, 4)
	s.Refill("t1/x", f.make)
	s.Refill("t2/x", f.make)
	s.Wait()
	if err := s.Drop(context.Background(), func(k string) bool { return k == "t1/x" }); err != nil {
		t.Fatal(err)
	}
	if s.Count("t1/x") != 0 || s.Count("t2/x") != 1 || len(f.kills()) != 1 {
		t.Fatalf("after Drop: %d %d, killed %v", s.Count("t1/x"), s.Count("t2/x"), f.kills())
	}
	// A make still running at Close is killed when it ends.
	f.block = make(chan struct{})
	s.Refill("t3/x", f.make)
	done := make(chan error)
	go func() { done <- s.Close(context.Background()) }()
	testkit.WaitFor(t, 5*time.Second, "Close to begin", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.closed
	})
	close(f.block)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(s.Idle()) != 0 || len(f.kills()) != 3 {
		t.Fatalf("after Close: idle %v, killed %v", s.Idle(), f.kills())
	}
	s.Refill("t2/x", f.make)
	s.Wait()
	if s.Count("t2/x") != 0 {
		t.Fatal("a closed Set made a slot")
	}
}
