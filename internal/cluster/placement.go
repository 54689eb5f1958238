package cluster

import (
	"slices"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
)

// Need is what a sandbox asks of the node it is placed on.
type Need struct {
	MemoryMB int
	Runtime  string // "" = any
}

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
	over := p.Overcommit
	if over <= 0 {
		over = 4
	}
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	t := now()
	best, bestFree, runs, alive := -1, 0, false, false
	for i, l := range loads {
		if need.Runtime != "" && !slices.Contains(l.Runtimes, need.Runtime) {
			continue
		}
		runs = true
		if l.Lost || !l.LeaseUntil.After(t) {
			continue
		}
		alive = true
		free := int(float64(l.MemoryMB)*over) - l.ReservedMB - need.MemoryMB
		if free < 0 {
			continue
		}
		if best < 0 || free > bestFree || (free == bestFree && l.Sandboxes < loads[best].Sandboxes) {
			best, bestFree = i, free
		}
	}
	switch {
	case best >= 0:
		return loads[best].ID, nil
	case !runs && need.Runtime != "":
		return "", errdefs.Publicf(errdefs.ErrInvalidArgument, "no node runs the %s runtime", need.Runtime)
	case !alive:
		return "", errdefs.Publicf(errdefs.ErrUnavailable, "no node is available to run sandboxes; try again shortly")
	}
	return "", errdefs.Publicf(errdefs.ErrUnavailable, "no node has room for a sandbox of %d MiB; try again later", need.MemoryMB)
}
