// Package recovery reconciles the store with the runtimes at server
// start: sandboxes a runtime still has are adopted, the others are
// forgotten, and the runtimes remove leftovers of sandboxes nobody knows.
// It exists apart from the lifecycle because it runs once, before any
// request, and only decides; making an adopted sandbox live is the
// orchestrator's (Deps.Adopt).
package recovery

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"

	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
)

// Store is the part of the orchestrator's store recovery uses.
type Store interface {
	ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]store.Sandbox, error)
	UpdateSandbox(ctx context.Context, s store.Sandbox) error
	DeleteSandbox(ctx context.Context, id string) error
}

// Deps are what Run works with.
type Deps struct {
	Store   Store
	Runtime runtime.Runtime // every backend (a runtimeset.Set)
	// Runs reports whether a sandbox recorded with runtime name is this
	// server's to manage ("" is a row from before runtimes were recorded).
	Runs func(name string) bool
	// Enabled lists this server's runtimes (for the log).
	Enabled []string
	// Foreign is given the live sandboxes of runtimes this server does
	// not run, before the runtimes recover.
	Foreign func(map[string]store.Sandbox)
	// Adopt makes a recovered sandbox, recorded already, live at addr.
	Adopt func(ctx context.Context, sb store.Sandbox, addr netip.Addr)
	// Node is this server's node ID. Rows of another node are not this
	// server's to reconcile (that node's own start does, and a lost node's
	// are the registry watcher's): they are left as they are, handed over
	// as foreign (the API answers ErrUnavailable for them) and the runtime
	// removes nothing of theirs. Rows without a node (written before the
	// registry) are reconciled here and claimed when adopted.
	Node string
	Log  *slog.Logger
}

// Run reconciles this node's rows of the store with the runtimes.
//
// Live sandboxes of a runtime this server does not run (a vm sandbox left
// by an earlier server with --runtime vm) are left alone: their rows stay,
// their processes keep running, and the API answers ErrUnavailable for
// them (see livetable.Table.Get) until a server with that runtime adopts them.
func Run(ctx context.Context, d Deps) error {
	rows, err := d.Store.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	byID := map[string]store.Sandbox{}
	foreign := map[string]store.Sandbox{}
	var ids []string
	for _, sb := range rows {
		if !sb.State.Valid() {
			continue
		}
		// Every live ID goes to the runtime, foreign ones too: the network
		// manager the backends share keeps the networks of the IDs it is
		// given, and no runtime removes what another node may hold.
		ids = append(ids, sb.ID)
		if !d.Runs(sb.Runtime) || d.otherNode(sb.NodeID) {
			foreign[sb.ID] = sb
			continue
		}
		byID[sb.ID] = sb
	}
	keepForeign(d, foreign)
	handles, err := d.Runtime.Recover(ctx, ids)
	if err != nil {
		// A partial failure (some leftover not removed) must not stop the
		// server; losing every live sandbox because the runtime could not
		// list them would leak them, so that one aborts.
		if len(handles) == 0 && len(byID) > 0 {
			return fmt.Errorf("recover runtime %s: %w", d.Runtime.Name(), err)
		}
		d.Log.Warn("runtime recovery incomplete", "runtime", d.Runtime.Name(), "err", err)
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
		sb.NodeID = d.Node
		if err := d.Store.UpdateSandbox(ctx, sb); err != nil {
			return fmt.Errorf("recover %s: %w", sb.ID, err)
		}
		d.Adopt(ctx, sb, h.Addr)
		adopted[sb.ID] = true
	}
	for _, sb := range rows {
		if _, kept := foreign[sb.ID]; adopted[sb.ID] || kept {
			continue
		}
		if err := d.Store.DeleteSandbox(ctx, sb.ID); err != nil {
			return fmt.Errorf("recover: %w", err)
		}
	}
	d.Log.Info("recovered sandboxes", "adopted", len(adopted), "dropped", len(rows)-len(adopted)-len(foreign))
	return nil
}

// otherNode reports whether node is another node than this one: its rows
// are not this server's to reconcile.
func (d Deps) otherNode(node string) bool { return node != "" && node != d.Node }

// keepForeign hands over the live sandboxes of runtimes this server does
// not run, and warns once about them.
func keepForeign(d Deps, foreign map[string]store.Sandbox) {
	d.Foreign(foreign)
	if len(foreign) == 0 {
		return
	}
	var names []string
	for _, sb := range foreign {
		if !slices.Contains(names, sb.Runtime) {
			names = append(names, sb.Runtime)
		}
	}
	slices.Sort(names)
	d.Log.Warn("sandboxes of runtimes not enabled on this server are left running and unmanaged; "+
		"a server with those runtimes adopts them", "count", len(foreign), "runtimes", names, "enabled", d.Enabled)
}
