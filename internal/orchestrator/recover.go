package orchestrator

import (
	"context"
	"fmt"

	"github.com/moatsh/moat/internal/store"
)

// Recover reconciles the store with the runtime at server start: sandboxes
// the runtime still has are adopted (routable again), the others are
// forgotten, and the runtime removes leftovers of sandboxes nobody knows.
func (o *Orchestrator) Recover(ctx context.Context) error {
	rows, err := o.db.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	byID := map[string]store.Sandbox{}
	var ids []string
	for _, sb := range rows {
		switch sb.State {
		case store.StateRunning, store.StatePaused, store.StatePausing, store.StateResuming:
			byID[sb.ID] = sb
			ids = append(ids, sb.ID)
		}
	}
	handles, err := o.rt.Recover(ctx, ids)
	if err != nil {
		// A partial failure (some leftover not removed) must not stop the
		// server; losing every live sandbox because the runtime could not
		// list them would leak them, so that one aborts.
		if len(handles) == 0 && len(ids) > 0 {
			return fmt.Errorf("recover runtime %s: %w", o.rt.Name(), err)
		}
		o.log.Warn("runtime recovery incomplete", "runtime", o.rt.Name(), "err", err)
	}
	adopted := map[string]bool{}
	for _, h := range handles {
		sb, ok := byID[h.ID]
		if !ok {
			continue
		}
		// The runtime knows whether an interrupted pause or resume finished.
		sb.State = store.StateRunning
		if h.Paused {
			sb.State = store.StatePaused
		}
		if h.Addr.IsValid() {
			sb.Addr = h.Addr.String()
		}
		if err := o.db.UpdateSandbox(ctx, sb); err != nil {
			return fmt.Errorf("recover %s: %w", sb.ID, err)
		}
		// The host kept the policy across the restart; re-apply it from
		// the store so both agree.
		if err := o.applyEgress(ctx, sb); err != nil {
			o.log.Warn("re-apply network policy", "sandboxID", sb.ID, "err", err)
		}
		o.mu.Lock()
		o.live[sb.ID] = &entry{sb: sb, addr: h.Addr}
		o.mu.Unlock()
		adopted[sb.ID] = true
	}
	for _, sb := range rows {
		if adopted[sb.ID] {
			continue
		}
		if err := o.db.DeleteSandbox(ctx, sb.ID); err != nil {
			return fmt.Errorf("recover: %w", err)
		}
	}
	o.log.Info("recovered sandboxes", "adopted", len(adopted), "dropped", len(rows)-len(adopted))
	return nil
}
