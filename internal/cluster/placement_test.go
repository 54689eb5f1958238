package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/testkit/pgtest"
)

func TestPick(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	alive := now.Add(time.Second)
	node := func(id string, memMB, reserved, n int, rts ...string) store.NodeLoad {
		return store.NodeLoad{Node: store.Node{ID: id, MemoryMB: memMB, Runtimes: rts, LeaseUntil: alive}, ReservedMB: reserved, Sandboxes: n}
	}
	lost := node("lost", 8192, 0, 0, "container")
	lost.Lost = true
	expired := node("expired", 8192, 0, 0, "container")
	expired.LeaseUntil = now
	tests := []struct {
		name    string
		loads   []store.NodeLoad
		need    Need
		want    string
		wantErr error
	}{
		{"most room", []store.NodeLoad{node("a", 1024, 512, 2, "container"), node("b", 1024, 0, 0, "container")}, Need{MemoryMB: 256, Runtime: "container"}, "b", nil},
		{"tie: fewer sandboxes", []store.NodeLoad{node("a", 1024, 0, 3, "container"), node("b", 1024, 0, 1, "container")}, Need{MemoryMB: 256}, "b", nil},
		{"tie: smaller ID", []store.NodeLoad{node("a", 1024, 0, 1, "container"), node("b", 1024, 0, 1, "container")}, Need{MemoryMB: 256}, "a", nil},
		{"runtime", []store.NodeLoad{node("a", 4096, 0, 0, "container"), node("b", 1024, 0, 0, "vm")}, Need{MemoryMB: 256, Runtime: "vm"}, "b", nil},
		{"full at the edge", []store.NodeLoad{node("a", 256, 768, 3, "container")}, Need{MemoryMB: 256}, "a", nil},
		{"full", []store.NodeLoad{node("a", 256, 1024, 4, "container")}, Need{MemoryMB: 256}, "", errdefs.ErrUnavailable},
		{"lost and expired skipped", []store.NodeLoad{expired, lost, node("z", 256, 0, 0, "container")}, Need{MemoryMB: 256}, "z", nil},
		{"only lost", []store.NodeLoad{lost, expired}, Need{MemoryMB: 256}, "", errdefs.ErrUnavailable},
		{"no node runs it", []store.NodeLoad{node("a", 4096, 0, 0, "container")}, Need{MemoryMB: 256, Runtime: "gvisor"}, "", errdefs.ErrInvalidArgument},
		{"no nodes", nil, Need{MemoryMB: 256}, "", errdefs.ErrUnavailable},
		{"pinned to its volumes' node", []store.NodeLoad{node("a", 4096, 0, 0, "container"), node("b", 1024, 512, 3, "container")}, Need{MemoryMB: 256, Node: "b"}, "b", nil},
		{"pinned node full", []store.NodeLoad{node("a", 4096, 0, 0, "container"), node("b", 256, 1024, 4, "container")}, Need{MemoryMB: 256, Node: "b"}, "", errdefs.ErrUnavailable},
		{"pinned node lost", []store.NodeLoad{node("a", 4096, 0, 0, "container"), lost}, Need{MemoryMB: 256, Node: "lost"}, "", errdefs.ErrUnavailable},
		{"pinned node gone", []store.NodeLoad{node("a", 4096, 0, 0, "container")}, Need{MemoryMB: 256, Node: "b"}, "", errdefs.ErrUnavailable},
	}
	p := Placement{Now: func() time.Time { return now }}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := p.Pick(tt.loads, tt.need)
			if got != tt.want || !errors.Is(err, tt.wantErr) {
				t.Fatalf("Pick = %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// TestRank: Rank's order is the one repeated Picks give, each chosen node
// taken out (what the front door's candidates did), over random loads
// with ties, full, lost, expired and other-runtime nodes; with no node
// that fits, its error is Pick's.
func TestRank(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	p := Placement{Now: func() time.Time { return now }}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		loads := make([]store.NodeLoad, rng.IntN(40))
		for i := range loads {
			l := store.NodeLoad{Node: store.Node{ID: fmt.Sprintf("n%02d", i), MemoryMB: 256 * rng.IntN(4),
				Runtimes: []string{[]string{"container", "vm"}[rng.IntN(2)]}, LeaseUntil: now.Add(time.Second)},
				ReservedMB: 256 * rng.IntN(8), Sandboxes: rng.IntN(3)}
			switch rng.IntN(10) {
			case 0:
				l.Lost = true
			case 1:
				l.LeaseUntil = now
			}
			loads[i] = l
		}
		need := Need{MemoryMB: 256, Runtime: []string{"", "container", "gvisor"}[rng.IntN(3)]}
		var want []string
		rest := slices.Clone(loads)
		id, wantErr := p.Pick(rest, need)
		for err := wantErr; err == nil; id, err = p.Pick(rest, need) {
			want = append(want, id)
			rest = slices.DeleteFunc(rest, func(l store.NodeLoad) bool { return l.ID == id })
		}
		got, err := p.Rank(loads, need)
		if !slices.Equal(got, want) || (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
			t.Fatalf("round %d: Rank = %v, %v; repeated Picks = %v, %v", round, got, err, want, wantErr)
		}
	}
}

// TestRankPrefers: the node that holds the template goes first while it
// has at most one sandbox's memory less room than the best; past that the
// emptier node does (and creates of a template spread as it is copied).
func TestRankPrefers(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	p := Placement{Now: func() time.Time { return now }}
	node := func(id string, reserved int) store.NodeLoad {
		return store.NodeLoad{Node: store.Node{ID: id, MemoryMB: 1024, Runtimes: []string{"container"}, LeaseUntil: now.Add(time.Hour)},
			ReservedMB: reserved}
	}
	for _, tc := range []struct {
		name  string
		loads []store.NodeLoad
		want  string
	}{
		{"equal: the holder", []store.NodeLoad{node("a", 0), node("b", 0), node("c", 0)}, "c,a,b"},
		{"one sandbox fuller: still the holder", []store.NodeLoad{node("a", 0), node("c", 512)}, "c,a"},
		{"two sandboxes fuller: the emptier", []store.NodeLoad{node("a", 0), node("c", 1024)}, "a,c"},
		{"the holder is the best anyway", []store.NodeLoad{node("a", 512), node("c", 0)}, "c,a"},
		{"the holder does not fit", []store.NodeLoad{node("a", 0), node("c", 4096)}, "a"},
		{"the best of two holders", []store.NodeLoad{node("a", 0), node("b", 512), node("z", 256)}, "z,a,b"},
	} {
		got, err := p.Rank(tc.loads, Need{MemoryMB: 512, Prefer: []string{"c", "z"}})
		if err != nil || strings.Join(got, ",") != tc.want {
			t.Errorf("%s: %v, %v; want %s", tc.name, got, err, tc.want)
		}
	}
}

// TestRankWarm: a node with a ready warm member of the create's template
// comes first while it is at most warmSlack sandboxes fuller than the
// best, before the template's holders.
func TestRankWarm(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	p := Placement{Now: func() time.Time { return now }}
	node := func(id string, reserved int, warm ...string) store.NodeLoad {
		return store.NodeLoad{Node: store.Node{ID: id, MemoryMB: 1024, Runtimes: []string{"container"}, LeaseUntil: now.Add(time.Hour),
			Warm: warm}, ReservedMB: reserved}
	}
	for _, tc := range []struct {
		name  string
		loads []store.NodeLoad
		need  Need
		want  string
	}{
		{"the warm node, four sandboxes fuller", []store.NodeLoad{node("a", 0), node("b", 2048, "tpl")}, Need{MemoryMB: 512, Template: "tpl"}, "b,a"},
		{"the warm node, five sandboxes fuller", []store.NodeLoad{node("a", 0), node("b", 2560, "tpl")}, Need{MemoryMB: 512, Template: "tpl"}, "a,b"},
		{"warm for another template", []store.NodeLoad{node("a", 0), node("b", 1024, "other")}, Need{MemoryMB: 512, Template: "tpl"}, "a,b"},
		{"the warm node has no room", []store.NodeLoad{node("a", 0), node("b", 4000, "tpl")}, Need{MemoryMB: 512, Template: "tpl"}, "a"},
		{"warm before a holder", []store.NodeLoad{node("a", 0), node("h", 0), node("w", 512, "tpl")},
			Need{MemoryMB: 512, Template: "tpl", Prefer: []string{"h"}}, "w,a,h"},
		{"the best of two warm nodes", []store.NodeLoad{node("a", 0), node("w1", 2048, "tpl"), node("w2", 1024, "tpl")},
			Need{MemoryMB: 512, Template: "tpl"}, "w2,a,w1"},
		{"no template: no preference", []store.NodeLoad{node("a", 0), node("b", 1024, "tpl")}, Need{MemoryMB: 512}, "a,b"},
	} {
		got, err := p.Rank(tc.loads, tc.need)
		if err != nil || strings.Join(got, ",") != tc.want {
			t.Errorf("%s: %v, %v; want %s", tc.name, got, err, tc.want)
		}
	}
}

// BenchmarkCandidates: a create's candidate order with 500 nodes by
// repeated Picks (O(N²), as the front door's candidates computed it) and
// by Rank.
func BenchmarkCandidates(b *testing.B) {
	now := time.Now()
	loads := make([]store.NodeLoad, 500)
	for i := range loads {
		loads[i] = store.NodeLoad{Node: store.Node{ID: fmt.Sprintf("n%03d", i), MemoryMB: 1 << 16,
			Runtimes: []string{"container"}, LeaseUntil: now.Add(time.Hour)}, ReservedMB: 512 * (i % 7), Sandboxes: i % 7}
	}
	p, need := Placement{}, Need{MemoryMB: 512}
	b.Run("repeated-pick", func(b *testing.B) {
		for b.Loop() {
			rest := slices.Clone(loads)
			for len(rest) > 0 {
				id, err := p.Pick(rest, need)
				if err != nil {
					b.Fatal(err)
				}
				i := slices.IndexFunc(rest, func(l store.NodeLoad) bool { return l.ID == id })
				rest = slices.Delete(rest, i, i+1)
			}
		}
	})
	b.Run("rank", func(b *testing.B) {
		for b.Loop() {
			if _, err := p.Rank(loads, need); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestPlaceNeverOverbooks: two stores on one database (two API servers)
// place 40 sandboxes at once on 3 nodes with room for 4 each: 12 are
// placed, 4 per node, the rest get ErrUnavailable. On SQLite and on
// PostgreSQL.
func TestPlaceNeverOverbooks(t *testing.T) {
	engines := map[string]func(t *testing.T) string{
		"sqlite":     func(t *testing.T) string { return filepath.Join(t.TempDir(), "moat.db") },
		"postgresql": func(t *testing.T) string { return pgtest.Start(t).NewDB(t) },
	}
	for name, loc := range engines {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			where := loc(t)
			dbs := []*store.DB{openAt(t, where), openAt(t, where)}
			lease := time.Now().Add(time.Hour)
			for _, id := range []string{"n1", "n2", "n3"} {
				if err := dbs[0].RegisterNode(ctx, store.Node{ID: id, MemoryMB: 1024, Runtimes: []string{"container"}, LeaseUntil: lease}); err != nil {
					t.Fatal(err)
				}
			}
			p := Placement{Overcommit: 1}
			var mu sync.Mutex
			placed, full := map[string]int{}, 0
			var wg sync.WaitGroup
			for i := range 40 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sb := store.Sandbox{ID: fmt.Sprintf("s%02d", i), Team: "t", TemplateID: "base", State: store.StateRunning,
						MemoryMB: 256, StartedAt: time.Now()}
					got, err := dbs[i%2].PlaceSandbox(ctx, sb, func(l []store.NodeLoad) (string, error) {
						return p.Pick(l, Need{MemoryMB: 256, Runtime: "container"})
					})
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						placed[got.NodeID]++
					case errors.Is(err, errdefs.ErrUnavailable):
						full++
					default:
						t.Errorf("place %s: %v", sb.ID, err)
					}
				}()
			}
			wg.Wait()
			if placed["n1"] != 4 || placed["n2"] != 4 || placed["n3"] != 4 || full != 28 {
				t.Fatalf("placed %v, %d refused; want 4 on each node and 28 refused", placed, full)
			}
			loads, err := dbs[1].NodeLoads(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range loads {
				if l.ReservedMB != 1024 || l.Sandboxes != 4 {
					t.Errorf("load of %s: %d MiB in %d sandboxes", l.ID, l.ReservedMB, l.Sandboxes)
				}
			}
		})
	}
}

func openAt(t testing.TB, loc string) *store.DB {
	d, err := store.Open(context.Background(), loc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// BenchmarkPlacement places MOAT_BENCH_PLACE (default 2000) sandboxes
// through store.PlaceSandbox on PostgreSQL, 16 at once from two stores
// (two API servers), with N = 10, 100 and 500 registered nodes, and
// prints placements per second and the median and p99 of one placement.
func BenchmarkPlacement(b *testing.B) {
	pg := pgtest.Start(b)
	m := 2000
	for _, n := range []int{10, 100, 500} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			ctx := context.Background()
			dsn := pg.NewDB(b)
			dbs := []*store.DB{openAt(b, dsn), openAt(b, dsn)}
			lease := time.Now().Add(time.Hour)
			for i := range n {
				if err := dbs[0].RegisterNode(ctx, store.Node{ID: fmt.Sprintf("n%03d", i), MemoryMB: 1 << 20,
					Runtimes: []string{"container"}, LeaseUntil: lease}); err != nil {
					b.Fatal(err)
				}
			}
			p := Placement{}
			lat := make([]time.Duration, m)
			next := make(chan int)
			var wg sync.WaitGroup
			start := time.Now()
			for w := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range next {
						t0 := time.Now()
						sb := store.Sandbox{ID: fmt.Sprintf("s%06d", i), Team: "t", TemplateID: "base", State: store.StateRunning,
							MemoryMB: 256, StartedAt: t0}
						if _, err := dbs[w%2].PlaceSandbox(ctx, sb, func(l []store.NodeLoad) (string, error) {
							return p.Pick(l, Need{MemoryMB: 256, Runtime: "container"})
						}); err != nil {
							b.Error(err)
							return
						}
						lat[i] = time.Since(t0)
					}
				}()
			}
			for i := range m {
				next <- i
			}
			close(next)
			wg.Wait()
			took := time.Since(start)
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(m)/took.Seconds(), "places/s")
			fmt.Printf("placement N=%-4d M=%d: %6.0f places/s, p50 %s, p99 %s\n", n, m, float64(m)/took.Seconds(),
				lat[m/2].Round(10*time.Microsecond), lat[m*99/100].Round(10*time.Microsecond))
		})
	}
}
