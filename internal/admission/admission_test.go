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

func create(team string) Request { return Request{Op: "create", Team: team} }

// admitAsync admits r in a goroutine and waits until it runs or waits;
// the returned channel gets its release (or nil and the error).
type result struct {
	release func()
	err     error
}

func admitAsync(t *testing.T, c *Controller, ctx context.Context, r Request) <-chan result {
	t.Helper()
	before := c.Stats()
	out := make(chan result, 1)
	go func() {
		rel, err := c.Admit(ctx, r)
		out <- result{rel, err}
	}()
	testkit.WaitFor(t, 5*time.Second, "the admit to run or queue", func() bool {
		s := c.Stats()
		return s.Running+s.Waiting > before.Running+before.Waiting || len(out) > 0
	})
	return out
}

func TestAdmitRunsAtOnceThenQueues(t *testing.T) {
	c := New(Config{Concurrency: 2, MaxWait: time.Minute})
	ctx := context.Background()
	r1, err := c.Admit(ctx, create("a"))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.Admit(ctx, create("a"))
	if err != nil {
		t.Fatal(err)
	}
	third := admitAsync(t, c, ctx, create("a"))
	if s := c.Stats(); s.Running != 2 || s.Waiting != 1 {
		t.Fatalf("stats %+v, want 2 running, 1 waiting", s)
	}
	r1()
	r1() // a second release is harmless
	got := <-third
	if got.err != nil {
		t.Fatalf("queued admit: %v", got.err)
	}
	got.release()
	r2()
	if s := c.Stats(); s != (Stats{}) {
		t.Fatalf("stats after every release: %+v", s)
	}
}

func TestAdmitQueueBound(t *testing.T) {
	c := New(Config{Concurrency: 1, Queue: 1, MaxWait: time.Hour})
	ctx := context.Background()
	rel, _ := c.Admit(ctx, create("a"))
	defer rel()
	second := admitAsync(t, c, ctx, create("a"))
	_, err := c.Admit(ctx, create("a"))
	var re *RetryError
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !errors.As(err, &re) || re.RetryAfter() <= 0 ||
		!strings.Contains(err.Error(), "at capacity") {
		t.Fatalf("admit beyond the queue = %v, want a RetryError wrapping ErrResourceExhausted", err)
	}
	rel()
	if r := <-second; r.err != nil {
		t.Fatal(r.err)
	} else {
		r.release()
	}
}

// TestAdmitWaitsOnlyWhatItCan: a request waits when the queue ahead of it
// is expected to clear within MaxWait (or the client's deadline), and is
// refused at once, with the expected excess as Retry-After, otherwise.
func TestAdmitWaitsOnlyWhatItCan(t *testing.T) {
	c := New(Config{Concurrency: 1, MaxWait: 2500 * time.Millisecond})
	ctx := context.Background()
	rel, _ := c.Admit(ctx, create("a"))
	// an operation takes 1 s until one has finished: 1 s, 2 s, then 3 s
	var queued []<-chan result
	for range 2 {
		queued = append(queued, admitAsync(t, c, ctx, create("a")))
	}
	_, err := c.Admit(ctx, create("a"))
	var re *RetryError
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !errors.As(err, &re) || !strings.Contains(err.Error(), "about 3s to wait") {
		t.Fatalf("third in line = %v, want refused (3 s expected, 2.5 s allowed)", err)
	}
	if re.RetryAfter() < time.Second {
		t.Fatalf("Retry-After %s", re.RetryAfter())
	}
	// another team goes round the line: one of a's is ahead of it
	b := admitAsync(t, c, ctx, create("b"))
	// a client whose own deadline is sooner is refused sooner
	short, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	if _, err := c.Admit(short, create("c")); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("with a 1.5 s deadline: %v", err)
	}
	rel()
	drain(t, append(queued, b)...)
}

// drain releases each of the queued admits as it gets its slot.
func drain(t *testing.T, qs ...<-chan result) {
	t.Helper()
	var wg sync.WaitGroup
	for _, q := range qs {
		wg.Go(func() {
			r := <-q
			if r.err != nil {
				t.Error(r.err)
				return
			}
			r.release()
		})
	}
	wg.Wait()
}

// TestTeamsTakeTurns: a team that queues behind another's burst is served
// in turn, not after the whole burst.
func TestTeamsTakeTurns(t *testing.T) {
	c := New(Config{Concurrency: 1, MaxWait: time.Hour})
	ctx := context.Background()
	hold, _ := c.Admit(ctx, create("x"))
	type grant struct {
		team    string
		release func()
	}
	granted := make(chan grant, 8)
	queue := func(team string) {
		before := c.Stats().Waiting
		go func() {
			rel, err := c.Admit(ctx, create(team))
			if err != nil {
				t.Error(err)
				return
			}
			granted <- grant{team, rel}
		}()
		testkit.WaitFor(t, 5*time.Second, "the admit to queue", func() bool { return c.Stats().Waiting > before })
	}
	for range 5 {
		queue("a")
	}
	for range 2 {
		queue("b")
	}
	var order []string
	release := hold
	for range 7 {
		release()
		g := <-granted
		order, release = append(order, g.team), g.release
	}
	release()
	if got := strings.Join(order, ""); got != "ababaaa" {
		t.Fatalf("served %s, want ababaaa", got)
	}
}

// TestBackgroundYields: refills use at most half the slots and go only
// when no request waits.
func TestBackgroundYields(t *testing.T) {
	c := New(Config{Concurrency: 2, MaxWait: time.Hour})
	ctx := context.Background()
	bg := Request{Op: "pool", Background: true}
	bg1, err := c.Admit(ctx, bg)
	if err != nil {
		t.Fatal(err)
	}
	bg2 := admitAsync(t, c, ctx, bg) // waits: a second refill would take the last slot
	if s := c.Stats(); s.Running != 1 || s.Waiting != 1 {
		t.Fatalf("stats %+v", s)
	}
	fg1, err := c.Admit(ctx, create("a")) // the free slot, at once
	if err != nil {
		t.Fatal(err)
	}
	fg2 := admitAsync(t, c, ctx, create("a"))
	bg1()
	r := <-fg2 // the request before the refill waiting longer
	if r.err != nil {
		t.Fatal(r.err)
	}
	if s := c.Stats(); s.Running != 2 || s.Waiting != 1 {
		t.Fatalf("stats %+v: the refill ran before the request", s)
	}
	fg1()
	if b := <-bg2; b.err != nil {
		t.Fatal(b.err)
	} else {
		b.release()
	}
	r.release()
}

func TestAdmitWaiterLeavesWhenClientGoesAway(t *testing.T) {
	c := New(Config{Concurrency: 1})
	rel, err := c.Admit(context.Background(), create("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer rel()
	ctx, cancel := context.WithCancel(context.Background())
	got := admitAsync(t, c, ctx, create("a"))
	cancel()
	if r := <-got; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("abandoned admit = %v, want context.Canceled", r.err)
	}
	if s := c.Stats(); s.Waiting != 0 || s.Running != 1 {
		t.Fatalf("stats after abandon = %+v", s)
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
	r := Request{Op: "create", Team: "a", Need: Need{MemoryMiB: 512}}
	_, err := c.Admit(context.Background(), r)
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
	rel, err := c.Admit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	rel()
}

func TestAdmitUnderLoadNeverExceedsConcurrency(t *testing.T) {
	const conc = 3
	c := New(Config{Concurrency: conc, MaxWait: time.Hour})
	var mu sync.Mutex
	running, peak := 0, 0
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := create(string(rune('a' + i%3)))
			r.Background = i%7 == 0
			rel, err := c.Admit(context.Background(), r)
			if err != nil {
				t.Error(err)
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
	if s := c.Stats(); s != (Stats{}) {
		t.Fatalf("stats after all: %+v", s)
	}
}
