// Package warmpool keeps warm pools (moat serve --pool TEMPLATE=N): N
// sandboxes of a template are kept created, with envd answering, but not
// handed out. A create of that template takes one and only applies what
// the request carries (network policy, envd's /init with env, user and
// access token, the template's start command), so it answers in
// milliseconds instead of a full start.
//
// The package is the bookkeeping: which members are ready, refilling one
// at a time per pool, dropping members of an outdated template version
// (rebuilt since they were made), the hand-out and the host reservation.
// Making, and killing, a member is the orchestrator's (Source), which
// creates it through admission control so that user requests keep their
// share of the host.
//
// A member is never reused: once handed out it is an ordinary sandbox and
// is killed like one. Until then it has no store row (the E2B API never
// lists it; a restart's Recover removes it, as every sandbox the store
// does not know), its network is deny-all, it holds its template's files
// (template GC leaves them) and it counts against the host reservation.
package warmpool

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/admission"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
)

// Spec asks for Size warm sandboxes of Template (an ID or name of a
// shared template or one of the default team's).
type Spec struct {
	Template string
	Size     int
}

// Status describes one pool for operators.
type Status struct {
	Template string
	Size     int
	Ready    int
	IDs      []string
	// TemplateIDs are the store IDs of the templates its ready members
	// were made from (one, but for a template rebuilt meanwhile).
	TemplateIDs []string
}

// Member is one warm sandbox.
type Member struct {
	Spec       runtime.Spec
	Handle     runtime.Handle
	TemplateID string
	Version    string // the template's version when it was made (Version)
	Release    func() // lets template GC have its files again
	Made       time.Time
}

// Source makes and kills members: the orchestrator.
type Source interface {
	// Template resolves a pool's template reference.
	Template(ctx context.Context, ref string) (store.Template, error)
	// Make creates one warm sandbox of tpl whose envd answers; on an
	// error nothing of it is left.
	Make(ctx context.Context, tpl store.Template) (*Member, error)
	// Kill removes m's sandbox and calls m.Release when set.
	Kill(ctx context.Context, m *Member)
}

// Version identifies a build of t: members of another version are not
// handed out.
func Version(t store.Template) string {
	return t.ID + "/" + t.BuildID + "/" + t.UpdatedAt.UTC().Format(time.RFC3339Nano)
}

// retry is the pause after a failed refill.
const retry = 5 * time.Second

// poll is how often a full pool checks that its template is unchanged.
const poll = 2 * time.Second

// settle is how long a pool waits after a hand-out before it makes the
// replacement. The sandbox just handed out is about to run its first
// commands, and on a small host a member's creation (the OCI runtime,
// envd's start, a microVM's restore) takes the CPU they need: on the
// 2-core test host the pooled create→first command took 15.8 ms with
// the refill starting at once. A burst of hand-outs still empties the
// pool; it refills from settle after the first.
const settle = 200 * time.Millisecond

// killTimeout bounds the kills of a draining pool.
const killTimeout = 30 * time.Second

// Pools are the running pools. Safe for concurrent use.
type Pools struct {
	src Source
	log *slog.Logger
	// poll, retry and settle are the constants of the same names; tests shorten them.
	poll, retry, settle time.Duration

	mu    sync.Mutex
	pools []*pool // guarded by mu
	wg    sync.WaitGroup
}

// pool is one template's warm sandboxes.
type pool struct {
	spec    Spec
	wake    chan struct{} // a member was taken: refill
	mu      sync.Mutex
	ready   []*Member // guarded by mu
	closed  bool      // guarded by mu
	takenAt time.Time // the last hand-out; guarded by mu
}

// New returns no pools yet; Start starts them.
func New(src Source, log *slog.Logger) *Pools {
	return &Pools{src: src, log: log, poll: poll, retry: retry, settle: settle}
}

// Start runs a pool per spec until ctx ends, then kills their members. It
// returns at once; Status reports on them.
func (ps *Pools) Start(ctx context.Context, specs []Spec) {
	for _, s := range specs {
		if s.Size <= 0 {
			continue
		}
		p := &pool{spec: s, wake: make(chan struct{}, 1)}
		ps.mu.Lock()
		ps.pools = append(ps.pools, p)
		ps.mu.Unlock()
		ps.wg.Add(1)
		go func() {
			defer ps.wg.Done()
			ps.run(ctx, p)
		}()
	}
}

// Wait waits for the pools' goroutines after their context ended (their
// members are killed by then).
func (ps *Pools) Wait() { ps.wg.Wait() }

// Status reports the pools' state, by template.
func (ps *Pools) Status() []Status {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]Status, 0, len(ps.pools))
	for _, p := range ps.pools {
		p.mu.Lock()
		st := Status{Template: p.spec.Template, Size: p.spec.Size, Ready: len(p.ready)}
		for _, m := range p.ready {
			st.IDs = append(st.IDs, m.Spec.ID)
			if !slices.Contains(st.TemplateIDs, m.TemplateID) {
				st.TemplateIDs = append(st.TemplateIDs, m.TemplateID)
			}
		}
		p.mu.Unlock()
		sort.Strings(st.IDs)
		out = append(out, st)
	}
	return out
}

// run keeps p full until ctx ends.
func (ps *Pools) run(ctx context.Context, p *pool) {
	log := ps.log.With("pool", p.spec.Template)
	defer ps.drain(p)
	for ctx.Err() == nil {
		tpl, err := ps.src.Template(ctx, p.spec.Template)
		if err == nil {
			ps.dropStale(ctx, p, Version(tpl))
		}
		p.mu.Lock()
		short, sinceTake := p.spec.Size-len(p.ready), time.Since(p.takenAt)
		p.mu.Unlock()
		wait := ps.poll
		switch {
		case err != nil:
			log.Warn("warm pool: template unavailable", "err", err)
			wait = ps.retry
		case short > 0 && sinceTake < ps.settle:
			// A hand-out this loop saw by polling, not through p.wake:
			// the settle time still applies.
			wait = ps.settle - sinceTake
		case short > 0:
			if err := ps.add(ctx, p, tpl); err != nil {
				if ctx.Err() == nil {
					log.Warn("warm pool: refill failed", "err", err)
				}
				wait = ps.retry
			} else {
				continue
			}
		}
		select {
		case <-ctx.Done():
		case <-p.wake:
			ps.settleAfterTake(ctx)
		case <-time.After(wait):
		}
	}
}

// settleAfterTake waits ps.settle (see settle) unless ctx ends first.
func (ps *Pools) settleAfterTake(ctx context.Context) {
	t := time.NewTimer(ps.settle)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// add makes one warm sandbox of tpl and adds it to p.
func (ps *Pools) add(ctx context.Context, p *pool, tpl store.Template) error {
	m, err := ps.src.Make(ctx, tpl)
	if err != nil {
		return err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		ps.src.Kill(context.WithoutCancel(ctx), m)
		return fmt.Errorf("pool %s: closed", tpl.Name)
	}
	p.ready = append(p.ready, m)
	n := len(p.ready)
	p.mu.Unlock()
	ps.log.Info("warm pool: member ready", "pool", p.spec.Template, "sandboxID", m.Spec.ID, "ready", n)
	return nil
}

// dropStale kills p's members made from another version of the template.
func (ps *Pools) dropStale(ctx context.Context, p *pool, version string) {
	p.mu.Lock()
	var stale []*Member
	keep := p.ready[:0]
	for _, m := range p.ready {
		if m.Version == version {
			keep = append(keep, m)
		} else {
			stale = append(stale, m)
		}
	}
	p.ready = keep
	p.mu.Unlock()
	for _, m := range stale {
		ps.log.Info("warm pool: template changed, member dropped", "pool", p.spec.Template, "sandboxID", m.Spec.ID)
		ps.src.Kill(ctx, m)
	}
}

// drain kills every member of p and closes it.
func (ps *Pools) drain(p *pool) {
	p.mu.Lock()
	ms := p.ready
	p.ready, p.closed = nil, true
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	for _, m := range ms {
		ps.src.Kill(ctx, m)
	}
}

// Take removes and returns a member of tpl's current version, or nil; rt,
// when set, is the runtime the create asks for. Its pool refills.
func (ps *Pools) Take(tpl store.Template, rt string) *Member {
	version := Version(tpl)
	ps.mu.Lock()
	pools := append([]*pool(nil), ps.pools...)
	ps.mu.Unlock()
	for _, p := range pools {
		p.mu.Lock()
		for i, m := range p.ready {
			if m.TemplateID == tpl.ID && m.Version == version && (rt == "" || rt == m.Spec.Runtime) {
				p.ready = append(p.ready[:i], p.ready[i+1:]...)
				p.takenAt = time.Now()
				p.mu.Unlock()
				select {
				case p.wake <- struct{}{}:
				default:
				}
				return m
			}
		}
		p.mu.Unlock()
	}
	return nil
}

// Reserved is what the ready members reserve on the host.
func (ps *Pools) Reserved() admission.Need {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var n admission.Need
	for _, p := range ps.pools {
		p.mu.Lock()
		for _, m := range p.ready {
			n.MemoryMiB += m.Spec.MemoryMiB
			n.DiskMiB += m.Spec.DiskMiB
		}
		p.mu.Unlock()
	}
	return n
}
