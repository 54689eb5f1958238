// Package cluster keeps the node registry in the shared store alive: a
// node (a `moat serve` whose roles include node) registers itself and
// renews its lease (Registrar), and every server watches the registry and
// marks lost the nodes whose lease ran out (Watcher). PostgreSQL's
// statements are the only coordination (docs/cluster.md): no consensus
// layer of Moat's own, no membership protocol between the servers.
//
// A store outage stops every renewal at once; when the store is back, no
// node is declared lost before it had a full lease to renew (the
// Watcher's grace), so an outage alone never costs a sandbox.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
)

// Store is the node registry (package store implements it on SQLite and
// PostgreSQL).
type Store interface {
	RegisterNode(ctx context.Context, n store.Node) error
	RenewNodeLease(ctx context.Context, id string, until time.Time) error
	SetNodeWarm(ctx context.Context, id string, warm []string) error
	ListNodes(ctx context.Context) ([]store.Node, error)
	MarkLostNodes(ctx context.Context, now time.Time) ([]string, error)
}

// Default lease timing: a node renews every DefaultRenew and is lost once
// unheard of for DefaultLease (the cluster issue: gone within 15 s).
const (
	DefaultLease = 12 * time.Second
	DefaultRenew = 3 * time.Second
)

// Registrar keeps one node registered. Its fields are set before Run.
type Registrar struct {
	Store Store
	Node  store.Node // LeaseUntil and StartedAt are set by Run
	Lease time.Duration
	Every time.Duration
	Now   func() time.Time
	Log   *slog.Logger
	// Lost, when set, runs when a renewal finds the node declared lost
	// (its sandboxes were reported gone meanwhile), before it registers
	// again: the node reconciles there.
	Lost func(ctx context.Context)
	// Warm, when set, lists the templates the node has a ready warm pool
	// member of; each tick writes it to the registry when it changed, so
	// that placement can send creates of those templates here.
	Warm func() []string

	saidWarm []string // what the registry holds (Run's goroutine only)
}

// Register registers the node once, now.
func (r *Registrar) Register(ctx context.Context) error {
	r.defaults()
	n := r.Node
	if n.StartedAt.IsZero() {
		n.StartedAt = r.Now().UTC()
		r.Node.StartedAt = n.StartedAt
	}
	n.LeaseUntil = r.Now().Add(r.Lease).UTC()
	if r.Warm != nil {
		n.Warm = r.Warm()
		slices.Sort(n.Warm)
	}
	if err := r.Store.RegisterNode(ctx, n); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	r.saidWarm = n.Warm
	return nil
}

// sayWarm writes the node's warm templates when they changed.
func (r *Registrar) sayWarm(ctx context.Context) {
	if r.Warm == nil {
		return
	}
	warm := r.Warm()
	slices.Sort(warm)
	if slices.Equal(warm, r.saidWarm) {
		return
	}
	if err := r.Store.SetNodeWarm(ctx, r.Node.ID, warm); err != nil {
		r.Log.WarnContext(ctx, "cluster: warm templates not recorded; retrying", "node", r.Node.ID, "err", err)
		return
	}
	r.saidWarm = warm
}

// Run renews the lease every r.Every until ctx ends (registering first,
// and again after the node was declared lost). Store errors are logged
// and retried at the next tick.
func (r *Registrar) Run(ctx context.Context) {
	r.defaults()
	registered := r.Register(ctx) == nil
	every(ctx, r.Every, func() { registered = r.tick(ctx, registered) })
}

// every calls f every d until ctx ends.
func every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f()
	}
}

// tick renews (or, when not registered, registers) once and reports
// whether the node is registered afterwards.
func (r *Registrar) tick(ctx context.Context, registered bool) bool {
	if !registered {
		if err := r.Register(ctx); err != nil {
			r.Log.WarnContext(ctx, "cluster: node registration failed; retrying", "node", r.Node.ID, "err", err)
			return false
		}
		r.Log.InfoContext(ctx, "cluster: node registered", "node", r.Node.ID)
		return true
	}
	err := r.Store.RenewNodeLease(ctx, r.Node.ID, r.Now().Add(r.Lease).UTC())
	switch {
	case err == nil:
		r.sayWarm(ctx)
		return true
	case errors.Is(err, errdefs.ErrFailedPrecondition), errdefs.IsNotFound(err):
		r.Log.WarnContext(ctx, "cluster: this node was declared lost; reconciling and registering again", "node", r.Node.ID, "err", err)
		if r.Lost != nil {
			r.Lost(ctx)
		}
		return r.tick(ctx, false)
	default:
		r.Log.WarnContext(ctx, "cluster: lease renewal failed; retrying", "node", r.Node.ID, "err", err)
		return true
	}
}

func (r *Registrar) defaults() { defaults(&r.Lease, &r.Every, &r.Now, &r.Log) }

// defaults fills the timing, clock and log a Registrar or Watcher left zero.
func defaults(lease, every *time.Duration, now *func() time.Time, log **slog.Logger) {
	if *lease <= 0 {
		*lease = DefaultLease
	}
	if *every <= 0 {
		*every = DefaultRenew
	}
	if *now == nil {
		*now = time.Now
	}
	if *log == nil {
		*log = slog.New(slog.DiscardHandler)
	}
}

// Watcher marks lost the nodes whose lease ran out. Every server runs
// one; the store gives each lost node to one of them.
type Watcher struct {
	Store Store
	Lease time.Duration // the nodes' lease (the grace after a store outage)
	Every time.Duration
	Now   func() time.Time
	Log   *slog.Logger
	// Lost runs for each node this watcher marked lost.
	Lost func(ctx context.Context, nodeID string)

	healthySince time.Time // since when the store answers without a break
}

// Run checks every w.Every until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	w.defaults()
	every(ctx, w.Every, func() { w.Check(ctx) })
}

// Check runs one round and returns the nodes it marked lost. Before the
// store has answered for a whole lease without a break (at start, and
// after an outage, when no node could renew), it marks none.
func (w *Watcher) Check(ctx context.Context) []string {
	w.defaults()
	now := w.Now()
	if w.healthySince.IsZero() || now.Sub(w.healthySince) < w.Lease {
		// Within the grace: only see whether the store answers.
		if _, err := w.Store.ListNodes(ctx); err != nil {
			w.healthySince = time.Time{}
			w.Log.DebugContext(ctx, "cluster: node registry unreachable", "err", err)
		} else if w.healthySince.IsZero() {
			w.healthySince = now
		}
		return nil
	}
	lost, err := w.Store.MarkLostNodes(ctx, now)
	if err != nil {
		w.healthySince = time.Time{}
		w.Log.WarnContext(ctx, "cluster: marking lost nodes failed", "err", err)
		return nil
	}
	slices.Sort(lost)
	for _, id := range lost {
		w.Log.WarnContext(ctx, "cluster: node lost (its lease ran out)", "node", id)
		if w.Lost != nil {
			w.Lost(ctx, id)
		}
	}
	return lost
}

func (w *Watcher) defaults() { defaults(&w.Lease, &w.Every, &w.Now, &w.Log) }
