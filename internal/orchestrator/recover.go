package orchestrator

import (
	"context"
	"net/netip"

	"github.com/moatsh/moat/internal/orchestrator/recovery"
	"github.com/moatsh/moat/internal/store"
)

// Recover reconciles the store with the runtime at server start (see
// package recovery): sandboxes the runtime still has are adopted
// (routable again, their network policy re-applied), the others are
// forgotten, and the runtime removes leftovers of sandboxes nobody knows.
func (o *Orchestrator) Recover(ctx context.Context) error {
	return recovery.Run(ctx, recovery.Deps{Store: o.db, Runtime: o.rt, Enabled: o.rts.Names(), Log: o.log, Node: o.cfg.NodeID,
		Runs: func(name string) bool {
			_, err := o.rts.Named(name)
			return err == nil
		},
		Foreign: o.live.SetForeign,
		Adopt: func(ctx context.Context, sb store.Sandbox, addr netip.Addr) {
			// The host kept the policy across the restart; re-apply it
			// from the store so both agree.
			if err := o.applyEgress(ctx, sb); err != nil {
				o.log.Warn("re-apply network policy", "sandboxID", sb.ID, "err", err)
			}
			o.add(sb, addr)
		}})
}
