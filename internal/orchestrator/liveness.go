package orchestrator

import (
	"context"
	"time"

	"github.com/moatsh/moat/internal/store"
)

// livenessInterval is how often running sandboxes are checked for a death
// nobody asked for (a guest kernel panic, an OOM-killed envd, a crashed
// QEMU); such a sandbox is cleaned up and reported as gone.
const livenessInterval = time.Second

// checkLiveness finds running sandboxes whose backend reports them dead and
// removes them like a kill, so that the API and the proxy say they are gone.
func (o *Orchestrator) checkLiveness(ctx context.Context) {
	var running []*entry
	o.mu.RLock()
	for _, e := range o.live {
		if !e.gone && !e.reaping && e.sb.State == store.StateRunning {
			running = append(running, e)
		}
	}
	o.mu.RUnlock()
	for _, e := range running {
		if ctx.Err() != nil {
			return
		}
		o.mu.RLock()
		id := e.sb.ID
		o.mu.RUnlock()
		if !o.rt.Alive(ctx, id) {
			o.died(ctx, e)
		}
	}
}

// died removes a sandbox that stopped on its own, rechecking under its op
// lock: a concurrent kill, pause or create may have changed it meanwhile.
func (o *Orchestrator) died(ctx context.Context, e *entry) {
	e.op.Lock()
	defer e.op.Unlock()
	o.mu.RLock()
	sb, gone := e.sb, e.gone
	o.mu.RUnlock()
	if gone || sb.State != store.StateRunning || o.rt.Alive(ctx, sb.ID) {
		return
	}
	log := o.log.With("sandboxID", sb.ID)
	if err := o.killLocked(ctx, e, sb.ID); err != nil {
		log.Error("clean up dead sandbox", "err", err)
		return
	}
	log.Warn("sandbox died on its own: removed")
}
