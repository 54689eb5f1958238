package warmpool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/testkit"
)

// fakeSource makes members as map entries; gate, when set, holds every
// Make until a value is sent on it.
type fakeSource struct {
	gate chan struct{}

	mu       sync.Mutex
	tpl      store.Template
	fail     int // this many Makes fail first
	made     int
	calls    []time.Time // when each Make began
	inflight int
	maxIn    int
	killed   []string
	released []string
}

func newSource() *fakeSource {
	return &fakeSource{tpl: store.Template{ID: "tpl1", Name: "base", BuildID: "b1",
		UpdatedAt: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}}
}

func (s *fakeSource) Template(ctx context.Context, ref string) (store.Template, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ref != s.tpl.Name {
		return store.Template{}, fmt.Errorf("template %s: not found", ref)
	}
	return s.tpl, nil
}

func (s *fakeSource) Make(ctx context.Context, tpl store.Template) (*Member, error) {
	s.mu.Lock()
	s.calls = append(s.calls, time.Now())
	s.inflight++
	s.maxIn = max(s.maxIn, s.inflight)
	s.mu.Unlock()
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if s.fail > 0 {
		s.fail--
		return nil, errors.New("no room")
	}
	s.made++
	id := fmt.Sprintf("w%d", s.made)
	return &Member{Spec: runtime.Spec{ID: id, Runtime: "container", MemoryMiB: 512, DiskMiB: 1024},
		TemplateID: tpl.ID, Version: Version(tpl), Made: time.Now(),
		Release: func() { s.mu.Lock(); s.released = append(s.released, id); s.mu.Unlock() }}, nil
}

func (s *fakeSource) Kill(ctx context.Context, m *Member) {
	s.mu.Lock()
	s.killed = append(s.killed, m.Spec.ID)
	s.mu.Unlock()
	if m.Release != nil {
		m.Release()
	}
}

// rebuild gives the template a new version, as a rebuild does.
func (s *fakeSource) rebuild() store.Template {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tpl.BuildID += "+"
	s.tpl.UpdatedAt = s.tpl.UpdatedAt.Add(time.Second)
	return s.tpl
}

func (s *fakeSource) snapshot() (made, maxIn int, killed, released []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.made, s.maxIn, slices.Clone(s.killed), slices.Clone(s.released)
}

// start runs pools of src with short pauses; they drain when the test ends.
func start(t *testing.T, src *fakeSource, specs ...Spec) *Pools {
	t.Helper()
	ps := New(src, slog.New(slog.DiscardHandler))
	ps.poll, ps.retry, ps.settle = 5*time.Millisecond, 5*time.Millisecond, time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	ps.Start(ctx, specs)
	t.Cleanup(func() { cancel(); ps.Wait() })
	return ps
}

// waitReady polls until the only pool has want ready members and returns
// their IDs.
func waitReady(t *testing.T, ps *Pools, want int) []string {
	t.Helper()
	var st []Status
	defer func() {
		if t.Failed() {
			t.Logf("pool status: %+v", st)
		}
	}()
	testkit.WaitFor(t, 5*time.Second, fmt.Sprintf("the pool to have %d ready members", want), func() bool {
		st = ps.Status()
		return len(st) == 1 && st[0].Ready == want
	})
	return st[0].IDs
}

func TestRefillOneAtATimeUpToSize(t *testing.T) {
	for _, size := range []int{1, 3} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			src := newSource()
			src.gate = make(chan struct{})
			ps := start(t, src, Spec{Template: "base", Size: size}, Spec{Template: "empty", Size: 0})
			for i := 1; i <= size; i++ {
				src.gate <- struct{}{}
				waitReady(t, ps, i)
			}
			// Full: no further Make starts (a send would block forever).
			select {
			case src.gate <- struct{}{}:
				t.Fatalf("a full pool of %d made another member", size)
			case <-time.After(50 * time.Millisecond): // a negative check: time for a wrong Make to start
			}
			made, maxIn, _, _ := src.snapshot()
			if made != size || maxIn != 1 {
				t.Fatalf("made %d members with up to %d at once, want %d one at a time", made, maxIn, size)
			}
			if n := ps.Reserved(); n.MemoryMiB != size*512 || n.DiskMiB != size*1024 {
				t.Fatalf("reserved %+v for %d members", n, size)
			}
		})
	}
}

// TestRefillSettlesAfterHandOut checks that the replacement of a member
// handed out is not begun before the pool's settle time (the sandbox
// handed out gets the host for its first commands), and is then.
func TestRefillSettlesAfterHandOut(t *testing.T) {
	src := newSource()
	ps := start(t, src, Spec{Template: "base", Size: 1})
	ps.settle = 150 * time.Millisecond // read by the pool's goroutine only after the Take below
	waitReady(t, ps, 1)
	tpl, _ := src.Template(context.Background(), "base")
	took := time.Now()
	if ps.Take(tpl, "") == nil {
		t.Fatal("no member")
	}
	waitReady(t, ps, 1)
	src.mu.Lock()
	calls := slices.Clone(src.calls)
	src.mu.Unlock()
	if len(calls) != 2 {
		t.Fatalf("%d Makes, want 2", len(calls))
	}
	if d := calls[1].Sub(took); d < 150*time.Millisecond {
		t.Fatalf("the replacement began %s after the hand-out, before the settle time (150ms)", d)
	}
}

func TestRefillRetriesAfterFailure(t *testing.T) {
	src := newSource()
	src.fail = 2
	ps := start(t, src, Spec{Template: "base", Size: 1})
	if ids := waitReady(t, ps, 1); len(ids) != 1 || ids[0] != "w1" {
		t.Fatalf("ready after two failed makes: %v", ids)
	}
}

func TestTakeNeverReusesAMember(t *testing.T) {
	src := newSource()
	ps := start(t, src, Spec{Template: "base", Size: 2})
	waitReady(t, ps, 2)
	tpl, _ := src.Template(context.Background(), "base")

	for _, tc := range []struct {
		name string
		tpl  store.Template
		rt   string
	}{
		{"other runtime", tpl, "vm"},
		{"other template", store.Template{ID: "tpl2", Name: "other"}, ""},
	} {
		if m := ps.Take(tc.tpl, tc.rt); m != nil {
			t.Fatalf("%s: took %s", tc.name, m.Spec.ID)
		}
	}

	taken := map[string]bool{}
	for i := range 6 {
		rt := ""
		if i%2 == 1 {
			rt = "container"
		}
		m := ps.Take(tpl, rt)
		if m == nil {
			t.Fatalf("take %d: no member", i)
		}
		if taken[m.Spec.ID] {
			t.Fatalf("take %d: %s handed out twice", i, m.Spec.ID)
		}
		taken[m.Spec.ID] = true
		for _, id := range waitReady(t, ps, 2) { // refilled
			if taken[id] {
				t.Fatalf("handed-out %s is ready again", id)
			}
		}
	}
	if _, _, killed, _ := src.snapshot(); len(killed) != 0 {
		t.Fatalf("handed-out members were killed by the pool: %v", killed)
	}
}

func TestTemplateChangeRebuildsThePool(t *testing.T) {
	src := newSource()
	ps := start(t, src, Spec{Template: "base", Size: 2})
	old := waitReady(t, ps, 2)
	oldTpl, _ := src.Template(context.Background(), "base")
	newTpl := src.rebuild()

	testkit.WaitFor(t, 5*time.Second, "two ready members, none of the old version", func() bool {
		st := ps.Status()
		return len(st) == 1 && st[0].Ready == 2 && !slices.Contains(st[0].IDs, old[0]) && !slices.Contains(st[0].IDs, old[1])
	})
	_, _, killed, released := src.snapshot()
	for _, id := range old {
		if !slices.Contains(killed, id) || !slices.Contains(released, id) {
			t.Fatalf("stale member %s: killed %v, released %v", id, killed, released)
		}
	}
	if m := ps.Take(oldTpl, ""); m != nil {
		t.Fatalf("old version handed out: %s", m.Spec.ID)
	}
	if m := ps.Take(newTpl, ""); m == nil || m.Version != Version(newTpl) {
		t.Fatalf("new version not handed out: %+v", m)
	}
}

func TestStopKillsReadyMembers(t *testing.T) {
	src := newSource()
	ps := New(src, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	ps.Start(ctx, []Spec{{Template: "base", Size: 2}})
	ready := waitReady(t, ps, 2)
	tpl, _ := src.Template(ctx, "base")
	taken := ps.Take(tpl, "")
	cancel()
	ps.Wait()
	_, _, killed, _ := src.snapshot()
	for _, id := range ready {
		if want := id != taken.Spec.ID; slices.Contains(killed, id) != want {
			t.Fatalf("after stop killed %v; ready were %v, %s was handed out", killed, ready, taken.Spec.ID)
		}
	}
	if st := ps.Status(); st[0].Ready != 0 {
		t.Fatalf("stopped pool still has members: %+v", st)
	}
}
