package admission

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/testkit"
)

func TestAdmitBoundsRunningAndWaiting(t *testing.T) {
	c := New(Config{Concurrency: 2, Queue: 1, MaxWait: time.Minute})
	ctx := context.Background()
	r1, err := c.Admit(ctx, "create", Need{})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.Admit(ctx, "create", Need{})
	if err != nil {
		t.Fatal(err)
	}
	// The third waits; the fourth finds the queue full at once.
	got := make(chan error, 1)
	go func() {
		rel, err := c.Admit(ctx, "create", Need{})
		if err == nil {
			defer rel()
		}
		got <- err
	}()
	testkit.WaitFor(t, 5*time.Second, "the third admit to wait in the queue", func() bool { return c.Stats().Waiting == 1 })
	_, err = c.Admit(ctx, "create", Need{})
	var re *RetryError
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !errors.As(err, &re) || re.RetryAfter() <= 0 {
		t.Fatalf("4th admit = %v, want a RetryError wrapping ErrResourceExhausted", err)
	}
	// At once: refused because the queue is full, not after MaxWait (a
	// minute) in it.
	if !strings.Contains(err.Error(), "at capacity") {
		t.Fatalf("4th admit = %v, want the full queue's refusal, not a wait's", err)
	}
	r1()
	r1() // a second release is harmless
	if err := <-got; err != nil {
		t.Fatalf("queued admit: %v", err)
	}
	r2()
	testkit.WaitFor(t, 5*time.Second, "every slot free and nobody waiting", func() bool { return c.Stats() == Stats{} })
}

func TestAdmitWaiterLeavesWhenClientGoesAway(t *testing.T) {
	c := New(Config{Concurrency: 1, Queue: 5})
	rel, err := c.Admit(context.Background(), "create", Need{})
	if err != nil {
		t.Fatal(err)
	}
	defer rel()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() { _, err := c.Admit(ctx, "create", Need{}); got <- err }()
	testkit.WaitFor(t, 5*time.Second, "the second admit to wait in the queue", func() bool { return c.Stats().Waiting == 1 })
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned admit = %v, want context.Canceled", err)
	}
	if s := c.Stats(); s.Waiting != 0 || s.Running != 1 {
		t.Fatalf("stats after abandon = %+v", s)
	}
}

func TestAdmitMaxWait(t *testing.T) {
	c := New(Config{Concurrency: 1, MaxWait: 50 * time.Millisecond})
	rel, _ := c.Admit(context.Background(), "resume", Need{})
	defer rel()
	_, err := c.Admit(context.Background(), "resume", Need{})
	if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("admit after MaxWait = %v", err)
	}
}

func TestAdmitNoRoomIs503AndFreesTheSlot(t *testing.T) {
	full := true
	var mu sync.Mutex
	c := New(Config{Concurrency: 1, Room: func(n Need) error {
		mu.Lock()
		defer mu.Unlock()
		if full && n.MemoryMiB > 0 {
			return errors.New("no memory")
		}
		return nil
	}})
	_, err := c.Admit(context.Background(), "create", Need{MemoryMiB: 512})
	var re *RetryError
	if !errors.Is(err, errdefs.ErrUnavailable) || !errors.As(err, &re) {
		t.Fatalf("admit on a full host = %v, want ErrUnavailable with Retry-After", err)
	}
	if s := c.Stats(); s.Running != 0 {
		t.Fatalf("a refused admit holds a slot: %+v", s)
	}
	mu.Lock()
	full = false
	mu.Unlock()
	rel, err := c.Admit(context.Background(), "create", Need{MemoryMiB: 512})
	if err != nil {
		t.Fatal(err)
	}
	rel()
}

func TestAdmitUnderLoadNeverExceedsConcurrency(t *testing.T) {
	const conc = 3
	c := New(Config{Concurrency: conc, Queue: 50})
	var mu sync.Mutex
	running, peak := 0, 0
	var wg sync.WaitGroup
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rel, err := c.Admit(context.Background(), "create", Need{})
			if err != nil {
				return
			}
			mu.Lock()
			running++
			peak = max(peak, running)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			running--
			mu.Unlock()
			rel()
		}()
	}
	wg.Wait()
	if peak > conc || peak == 0 {
		t.Fatalf("peak concurrency %d, want 1..%d", peak, conc)
	}
}
