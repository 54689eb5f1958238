package orchestrator

import (
	"context"
	"errors"
	"fmt"

	"github.com/moatsh/moat/internal/store"
)

// KillReasonNodeLost is the kill_reason of the killed events of a lost
// node's sandboxes.
const KillReasonNodeLost = "node_lost"

// NodeLost reports gone the sandboxes of node, which the registry has
// just declared lost (of several servers, one gets each lost node:
// cluster.Watcher). Their rows go, so list, get and the SDKs see them
// gone, each with a killed event (kill_reason "node_lost"); paused ones
// stay, to resume on their node when it is back. The node kills what it
// still runs of them when it learns it was lost (KillOrphans) or at its
// next start (Recover: a sandbox without a row is removed).
func (o *Orchestrator) NodeLost(ctx context.Context, node string) error {
	if node == "" || node == o.cfg.NodeID {
		return nil
	}
	rows, err := o.db.ListSandboxes(ctx, store.SandboxFilter{NodeID: node,
		States: []store.State{store.StateRunning, store.StatePausing, store.StateResuming}})
	if err != nil {
		return fmt.Errorf("node %s lost: %w", node, err)
	}
	var errs []error
	for _, sb := range rows {
		if err := o.db.DeleteSandbox(ctx, sb.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		o.emitKilled(ctx, sb, KillReasonNodeLost)
	}
	o.log.Warn("node lost: its sandboxes are reported gone", "node", node, "sandboxes", len(rows)-len(errs))
	return errors.Join(errs...)
}

// KillOrphans kills the sandboxes this node runs whose rows are gone:
// another server reported them gone when it declared this node lost
// (NodeLost). It runs when the node learns that, before it registers
// again.
func (o *Orchestrator) KillOrphans(ctx context.Context) error {
	live := o.live.All() // before the rows: a live entry's row was written before it
	rows, err := o.db.ListSandboxes(ctx, store.SandboxFilter{NodeID: o.cfg.NodeID})
	if err != nil {
		return fmt.Errorf("kill orphans: %w", err)
	}
	kept := map[string]bool{}
	for _, sb := range rows {
		kept[sb.ID] = true
	}
	var errs []error
	for _, e := range live {
		id := o.live.Sandbox(e).ID
		if kept[id] {
			continue
		}
		le, err := o.live.LockAny(id)
		if err != nil {
			continue // killed meanwhile
		}
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
		err = o.rt.Kill(kctx, id)
		cancel()
		if err == nil {
			o.forgetLocked(le, id)
			o.log.Info("killed a sandbox reported gone while this node was lost", "sandboxID", id)
		}
		le.Op.Unlock()
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
