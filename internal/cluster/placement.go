package cluster

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
)

// Need is what a sandbox asks of the node it is placed on.
type Need struct {
	MemoryMB int
	Runtime  string // "" = any
	// Node pins the sandbox to one node ("" = any): the one that holds
	// the volumes it mounts.
	Node string
	// Prefer names the nodes that hold the sandbox's template already
	// (the node that built it and those that copied it): Rank puts the
	// best of them first when it has at most one sandbox's memory less
	// room than the best node, so that a node need not copy the template
	// while one that has it is about as free.
	Prefer []string
	// Template is the create's template ID: a node with a ready warm pool
	// member of it (store.Node.Warm) comes first while it has at most
	// warmSlack sandboxes' memory less room than the best node, as a warm
	// create hands out a running sandbox instead of making one.
	Template string
}

// warmSlack bounds how much fuller than the best node a warm node may be
// and still come first. The registry's warm list is up to a lease renewal
// old, and a pool refills after each hand-out: without a bound, a node
// with a pool of one would take every create of its template. With it, a
// warm node takes a few more than its share, then the others take turns.
const warmSlack = 4

// Placement chooses a node for each sandbox (store.PlaceSandbox calls
// Pick inside its transaction, so the loads it sees are current).
type Placement struct {
	// Overcommit is how many times its memory a node may hand out
	// (the single host's --mem-overcommit; default 4).
	Overcommit float64
	Now        func() time.Time
}

// Pick returns the alive node that runs need.Runtime and has the most
// memory left after need (the fewest sandboxes, then the smallest ID, on
// a tie): creates spread over the nodes. Errors: ErrInvalidArgument when
// no registered node runs the runtime, ErrUnavailable when no such node
// is alive or has room (the API's 503).
func (p Placement) Pick(loads []store.NodeLoad, need Need) (string, error) {
	f := p.fit(need)
	best, bestFree := -1, 0
	for i, l := range loads {
		free, ok := f.free(l)
		if !ok {
			continue
		}
		if best < 0 || free > bestFree || (free == bestFree && l.Sandboxes < loads[best].Sandboxes) {
			best, bestFree = i, free
		}
	}
	if best < 0 {
		return "", f.none(need)
	}
	return loads[best].ID, nil
}

// Rank returns every node Pick could choose for need, best first: the
// order repeated Picks give (but for the best node warm for need.Template,
// moved first unless it is much fuller than the best, else the best of
// need.Prefer, moved first when it is about as free as the best) when each chosen node is taken out of loads
// (the front door's candidates, a create's next node when one refuses),
// in one sort instead of a Pick per node, which costs O(N²) a create
// (moat bench --cluster: with 500 nodes most of the API server's CPU).
// Its errors are Pick's when no node qualifies.
func (p Placement) Rank(loads []store.NodeLoad, need Need) ([]string, error) {
	f := p.fit(need)
	type cand struct {
		id         string
		free, sbxs int
		warm       bool
	}
	var cs []cand
	for _, l := range loads {
		if free, ok := f.free(l); ok {
			cs = append(cs, cand{l.ID, free, l.Sandboxes, need.Template != "" && slices.Contains(l.Warm, need.Template)})
		}
	}
	if len(cs) == 0 {
		return nil, f.none(need)
	}
	// Stable: a tie keeps the order of loads, as in Pick (NodeLoads' is
	// by ID; the front door shuffles it so that equal nodes share creates).
	slices.SortStableFunc(cs, func(a, b cand) int {
		return cmp.Or(cmp.Compare(b.free, a.free), cmp.Compare(a.sbxs, b.sbxs))
	})
	first := func(i int) {
		c := cs[i]
		copy(cs[1:i+1], cs[:i])
		cs[0] = c
	}
	if i := slices.IndexFunc(cs, func(c cand) bool { return c.warm }); i >= 0 && cs[i].free >= cs[0].free-warmSlack*need.MemoryMB {
		first(i)
	} else if i := slices.IndexFunc(cs, func(c cand) bool { return slices.Contains(need.Prefer, c.id) }); i > 0 && cs[i].free >= cs[0].free-need.MemoryMB {
		first(i)
	}
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.id
	}
	return out, nil
}

// fitter judges nodes for one need at one instant, and remembers why
// those it turned down did not fit.
type fitter struct {
	need                Need
	over                float64
	t                   time.Time
	pinned, runs, alive bool
}

func (p Placement) fit(need Need) *fitter {
	f := &fitter{need: need, over: p.Overcommit, t: time.Now()}
	if f.over <= 0 {
		f.over = 4
	}
	if p.Now != nil {
		f.t = p.Now()
	}
	return f
}

// free is the memory node l has left after the need, and whether it may
// take it: it runs the runtime, is alive and has room.
func (f *fitter) free(l store.NodeLoad) (int, bool) {
	if f.need.Node != "" {
		if l.ID != f.need.Node {
			return 0, false
		}
		f.pinned = true
	}
	if f.need.Runtime != "" && !slices.Contains(l.Runtimes, f.need.Runtime) {
		return 0, false
	}
	f.runs = true
	if l.Lost || !l.LeaseUntil.After(f.t) {
		return 0, false
	}
	f.alive = true
	free := int(float64(l.MemoryMB)*f.over) - l.ReservedMB - f.need.MemoryMB
	return free, free >= 0
}

// none is the error when no node fit.
func (f *fitter) none(need Need) error {
	on := ""
	if need.Node != "" {
		on = fmt.Sprintf(" (node %s, which holds the sandbox's volumes)", need.Node)
	}
	switch {
	case need.Node != "" && !f.pinned:
		return errdefs.Publicf(errdefs.ErrUnavailable, "node %s, which holds the sandbox's volumes, is not in the cluster", need.Node)
	case !f.runs && need.Runtime != "":
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "no node%s runs the %s runtime", on, need.Runtime)
	case !f.alive:
		return errdefs.Publicf(errdefs.ErrUnavailable, "no node%s is available to run sandboxes; try again shortly", on)
	}
	return errdefs.Publicf(errdefs.ErrUnavailable, "no node%s has room for a sandbox of %d MiB; try again later", on, need.MemoryMB)
}
