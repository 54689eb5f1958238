package cluster

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/store"
)

// clock is a settable time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// flaky is a store that fails while down is set.
type flaky struct {
	Store
	down bool
}

var errDown = errors.New("store down")

func (f *flaky) ListNodes(ctx context.Context) ([]store.Node, error) {
	if f.down {
		return nil, errDown
	}
	return f.Store.ListNodes(ctx)
}

func (f *flaky) MarkLostNodes(ctx context.Context, now time.Time) ([]string, error) {
	if f.down {
		return nil, errDown
	}
	return f.Store.MarkLostNodes(ctx, now)
}

func (f *flaky) RenewNodeLease(ctx context.Context, id string, until time.Time) error {
	if f.down {
		return errDown
	}
	return f.Store.RenewNodeLease(ctx, id, until)
}

func openStore(t *testing.T) *store.DB {
	d, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestLeases: a node that renews stays; one that stops is lost after its
// lease, once; a store outage longer than the lease loses nobody who
// renews again within a lease of the store's return; a lost node that
// renews learns it (Lost runs) and registers again.
func TestLeases(t *testing.T) {
	ctx := context.Background()
	db := &flaky{Store: openStore(t)}
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	const lease, every = 10 * time.Second, 2 * time.Second
	reconciled := 0
	a := &Registrar{Store: db, Node: store.Node{ID: "a", Addr: "10.0.0.1:7070", Runtimes: []string{"container"}},
		Lease: lease, Every: every, Now: clk.Now, Lost: func(context.Context) { reconciled++ }}
	b := &Registrar{Store: db, Node: store.Node{ID: "b", Addr: "10.0.0.2:7070"}, Lease: lease, Every: every, Now: clk.Now}
	var lost []string
	w := &Watcher{Store: db, Lease: lease, Every: every, Now: clk.Now,
		Lost: func(_ context.Context, id string) { lost = append(lost, id) }}
	for _, r := range []*Registrar{a, b} {
		if err := r.Register(ctx); err != nil {
			t.Fatal(err)
		}
	}
	aOK, bOK := true, true
	// step advances the clock by every; a always renews, b while bAlive.
	step := func(bAlive bool) []string {
		clk.Add(every)
		aOK = a.tick(ctx, aOK)
		if bAlive {
			bOK = b.tick(ctx, bOK)
		}
		return w.Check(ctx)
	}
	for range 10 {
		if got := step(true); len(got) != 0 {
			t.Fatalf("lost %v while both renew", got)
		}
	}
	// b stops: lost after its lease, exactly once.
	var gone []string
	for range 10 {
		gone = append(gone, step(false)...)
	}
	if len(gone) != 1 || gone[0] != "b" || len(lost) != 1 {
		t.Fatalf("lost %v (callback %v), want [b] once", gone, lost)
	}
	if n, _ := db.Store.(*store.DB).GetNode(ctx, "b"); !n.Lost {
		t.Fatalf("b is not marked lost: %+v", n)
	}
	// b comes back: its renewal finds it lost, it registers again.
	bOK = b.tick(ctx, bOK)
	if n, _ := db.Store.(*store.DB).GetNode(ctx, "b"); n.Lost || !bOK {
		t.Fatalf("b after its return: %+v registered=%v", n, bOK)
	}
	// A store outage of three leases: nobody renews, nobody is lost.
	db.down = true
	for range 15 {
		if got := step(true); len(got) != 0 {
			t.Fatalf("lost %v during the outage", got)
		}
	}
	db.down = false
	for range 10 {
		if got := step(true); len(got) != 0 {
			t.Fatalf("lost %v after the outage although both renew again", got)
		}
	}
	if reconciled != 0 {
		t.Fatalf("a reconciled %d times without being lost", reconciled)
	}
	// a is declared lost behind its back: its next renewal reconciles.
	clk.Add(lease * 2)
	if got := w.Check(ctx); len(got) != 2 {
		t.Fatalf("after two leases of silence: lost %v, want a and b", got)
	}
	aOK = a.tick(ctx, aOK)
	if reconciled != 1 || !aOK {
		t.Fatalf("reconciled %d, registered %v; want 1, true", reconciled, aOK)
	}
}

// TestRegistrarWarm: the registrar writes the node's warm templates at
// registration and at the ticks where they changed, sorted, and placement
// sees them in the loads.
func TestRegistrarWarm(t *testing.T) {
	ctx := context.Background()
	db := openStore(t)
	warm := []string{"t2", "t1"}
	r := &Registrar{Store: db, Node: store.Node{ID: "a", Runtimes: []string{"container"}}, Warm: func() []string { return slices.Clone(warm) }}
	if err := r.Register(ctx); err != nil {
		t.Fatal(err)
	}
	said := func() []string {
		n, err := db.GetNode(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		return n.Warm
	}
	if got := said(); !slices.Equal(got, []string{"t1", "t2"}) {
		t.Fatalf("registered warm %v", got)
	}
	for _, step := range [][]string{{"t1"}, nil, {"t3"}} {
		warm = step
		if !r.tick(ctx, true) {
			t.Fatal("tick: not registered")
		}
		if got := said(); !slices.Equal(got, step) && (len(got) != 0 || len(step) != 0) {
			t.Fatalf("warm %v recorded as %v", step, got)
		}
	}
	loads, err := db.NodeLoads(ctx)
	if err != nil || len(loads) != 1 || !slices.Equal(loads[0].Warm, []string{"t3"}) {
		t.Fatalf("loads %+v, %v", loads, err)
	}
}
