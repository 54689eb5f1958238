package vm

import (
	"context"

	"github.com/moatsh/moat/internal/netpolicy"
)

// SetEgress replaces a sandbox's egress policy on the host (see
// netpolicy.Manager.SetEgress): at once if its network is up, else when
// Create or Resume sets it up. It implements orchestrator.EgressSetter.
func (r *Runtime) SetEgress(ctx context.Context, id string, e netpolicy.Egress) error {
	return r.net.SetEgress(ctx, id, e)
}
