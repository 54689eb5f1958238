package vm

import (
	"context"
	"errors"
	"time"

	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/runtime"
)

// SetEgress replaces a sandbox's egress policy on the host (see
// netpolicy.Manager.SetEgress): at once if its network is up, else when
// Create or Resume sets it up. A paused sandbox's network teardown still
// pending (see release) runs first, so that the policy is never written
// onto the interface being removed. It implements orchestrator.EgressSetter.
func (r *Runtime) SetEgress(ctx context.Context, id string, e netpolicy.Egress) error {
	if b, ok := r.boxes.Lookup(id); ok {
		b.mu.Lock()
		r.finishTeardown(ctx, id, b)
		b.mu.Unlock()
	}
	return r.net.SetEgress(ctx, id, e)
}

// PruneTemplates removes the template images nothing needs any more (see
// templatesnap.Set.Prune) and returns the bytes freed.
func (r *Runtime) PruneTemplates(ctx context.Context, current []runtime.Spec, busy []string, minAge time.Duration) (int64, error) {
	serr := r.slots.DropStale(ctx, current)
	st, err := r.tpl.Prune(ctx, current, busy, minAge)
	err = errors.Join(serr, err)
	if st.Dirs+st.Snapshots > 0 {
		r.log.InfoContext(ctx, "template images pruned", "dirs", st.Dirs, "snapshots", st.Snapshots, "freed_mib", st.Bytes>>20)
	}
	return st.Bytes, err
}
