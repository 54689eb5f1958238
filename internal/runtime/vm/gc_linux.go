package vm

import (
	"context"
	"time"

	"github.com/moatsh/moat/internal/runtime"
)

// PruneTemplates removes the template images nothing needs any more (see
// templatesnap.Set.Prune) and returns the bytes freed.
func (r *Runtime) PruneTemplates(ctx context.Context, current []runtime.Spec, busy []string, minAge time.Duration) (int64, error) {
	st, err := r.tpl.Prune(ctx, current, busy, minAge)
	if st.Dirs+st.Snapshots > 0 {
		r.log.InfoContext(ctx, "template images pruned", "dirs", st.Dirs, "snapshots", st.Snapshots, "freed_mib", st.Bytes>>20)
	}
	return st.Bytes, err
}
