package vm

import (
	"context"
	"time"

	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/runtime"
)

// SetEgress replaces a sandbox's egress policy on the host (see
// netpolicy.Manager.SetEgress): at once if its network is up, else when
// Create or Resume sets it up. It implements orchestrator.EgressSetter.
func (r *Runtime) SetEgress(ctx context.Context, id string, e netpolicy.Egress) error {
	return r.net.SetEgress(ctx, id, e)
}

// PruneTemplates removes the template images nothing needs any more (see
// templatesnap.Set.Prune) and returns the bytes freed.
func (r *Runtime) PruneTemplates(ctx context.Context, current []runtime.Spec, busy []string, minAge time.Duration) (int64, error) {
	st, err := r.tpl.Prune(ctx, current, busy, minAge)
	if st.Dirs+st.Snapshots > 0 {
		r.log.InfoContext(ctx, "template images pruned", "dirs", st.Dirs, "snapshots", st.Snapshots, "freed_mib", st.Bytes>>20)
	}
	return st.Bytes, err
}
