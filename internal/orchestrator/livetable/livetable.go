// Package livetable is the orchestrator's in-memory table of live
// sandboxes: what the proxy routes to and the API finds, each with the
// lock that serialises lifecycle operations on it, the team that owns it,
// and what the host reserves for it. It also keeps the live sandboxes of
// runtimes this server does not run (answered 503, not 404) and the
// templates that creates under way use. It exists apart from the
// lifecycle so that the table, its lock and its ownership checks are one
// small unit; the orchestrator decides what the entries go through.
package livetable

import (
	"net/netip"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/orchestrator/usage"
	"github.com/moatsh/moat/internal/store"
)

// Entry is one live sandbox.
type Entry struct {
	Op sync.Mutex // serialises lifecycle operations on this sandbox

	// guarded by Table.mu
	sb      store.Sandbox
	addr    netip.Addr
	gen     uint64 // resumes so far
	gone    bool
	lastCPU uint64
	lastAt  time.Time

	history usage.History // its own lock
}

// Table is safe for concurrent use.
type Table struct {
	mu   sync.RWMutex
	live map[string]*Entry // guarded by mu; only running/paused (and transitional) sandboxes
	// foreign are the live sandboxes of runtimes this server does not run,
	// left alone by Recover (guarded by mu).
	foreign  map[string]store.Sandbox
	onRemove []func(id string) // guarded by mu; see OnRemove
	onKill   []func(id string) // guarded by mu; see OnKill
	// creating counts the creates under way per template ID (guarded by
	// mu), so that template garbage collection leaves their files alone.
	creating map[string]int
}

// New returns an empty table.
func New() *Table {
	return &Table{live: map[string]*Entry{}, creating: map[string]int{}}
}

// ErrNotFound is the error, of kind errdefs.ErrNotFound, for a sandbox id
// that does not exist or belongs to another team.
func ErrNotFound(id string) error {
	return errdefs.Publicf(errdefs.ErrNotFound, "Sandbox \"%s\" doesn't exist or you don't have access to it", id)
}

// ownedBy reports whether team owns e. Caller holds mu; a team is never
// empty, so "" owns nothing.
func (e *Entry) ownedBy(team string) bool {
	return team != "" && e.sb.Team == team
}

// Add makes sb, reachable at addr, live (routable).
func (t *Table) Add(sb store.Sandbox, addr netip.Addr) *Entry {
	e := &Entry{sb: sb, addr: addr}
	t.mu.Lock()
	t.live[sb.ID] = e
	t.mu.Unlock()
	return e
}

// Get returns team's live sandbox id; ErrNotFound when it is unknown,
// killed, or another team's.
func (t *Table) Get(team, id string) (store.Sandbox, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	e, ok := t.live[id]
	if !ok || !e.ownedBy(team) {
		return store.Sandbox{}, t.notLiveLocked(team, id)
	}
	return e.sb, nil
}

// Route returns live sandbox id's record, address and run (bumped by
// every resume); ok is false for an unknown or removed one.
func (t *Table) Route(id string) (sb store.Sandbox, addr netip.Addr, gen uint64, ok bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	e, found := t.live[id]
	if !found || e.gone {
		return store.Sandbox{}, netip.Addr{}, 0, false
	}
	return e.sb, e.addr, e.gen, true
}

// Owned returns team's live entry id with its record and address, without
// its op lock; ok is false for an unknown one or another team's.
func (t *Table) Owned(team, id string) (e *Entry, sb store.Sandbox, addr netip.Addr, ok bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	e, ok = t.live[id]
	if !ok || !e.ownedBy(team) {
		return nil, store.Sandbox{}, netip.Addr{}, false
	}
	return e, e.sb, e.addr, true
}

// Lock returns team's live entry id with its op lock held; the caller
// unlocks. Every team-scoped operation on one sandbox starts here: another
// team's sandbox is not found, with the same error as an unknown ID.
func (t *Table) Lock(team, id string) (*Entry, error) {
	t.mu.RLock()
	e, ok := t.live[id]
	ok = ok && e.ownedBy(team)
	var err error
	if !ok {
		err = t.notLiveLocked(team, id)
	}
	t.mu.RUnlock()
	if !ok {
		return nil, err
	}
	return t.lock(e, id)
}

// LockAny is Lock for callers not acting for a team: the proxy's
// auto-resume, which is authorised by the sandbox's envd access token.
func (t *Table) LockAny(id string) (*Entry, error) {
	e := t.Find(id)
	if e == nil {
		return nil, ErrNotFound(id)
	}
	return t.lock(e, id)
}

// lock takes e's op lock and checks that e was not removed meanwhile.
func (t *Table) lock(e *Entry, id string) (*Entry, error) {
	e.Op.Lock()
	t.mu.RLock()
	gone := e.gone
	t.mu.RUnlock()
	if gone {
		e.Op.Unlock()
		return nil, ErrNotFound(id)
	}
	return e, nil
}

// Find is live sandbox id's entry, or nil.
func (t *Table) Find(id string) *Entry {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.live[id]
}

// All are the live entries.
func (t *Table) All() []*Entry {
	t.mu.RLock()
	defer t.mu.RUnlock()
	all := make([]*Entry, 0, len(t.live))
	for _, e := range t.live {
		all = append(all, e)
	}
	return all
}

// Sandbox reads e's record.
func (t *Table) Sandbox(e *Entry) store.Sandbox {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return e.sb
}

// Read returns e's record, run and whether it was removed.
func (t *Table) Read(e *Entry) (sb store.Sandbox, gen uint64, gone bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return e.sb, e.gen, e.gone
}

// Set replaces e's record (the store has it already).
func (t *Table) Set(e *Entry, sb store.Sandbox) {
	t.mu.Lock()
	e.sb = sb
	t.mu.Unlock()
}

// Moved records that e runs again at addr (a resume): its run changes, so
// connections from before are stale.
func (t *Table) Moved(e *Entry, addr netip.Addr) {
	t.mu.Lock()
	e.addr = addr
	e.gen++
	t.mu.Unlock()
}

// Watch calls f with e's record, run and removal under the table's write
// lock, so that calls for the same entry see its changes in order.
func (t *Table) Watch(e *Entry, f func(sb store.Sandbox, gen uint64, gone bool)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f(e.sb, e.gen, e.gone)
}

// Forget removes e (unroutable, not found), calls also under the table's
// lock, then the OnRemove funcs. Caller holds e.Op.
func (t *Table) Forget(e *Entry, id string, also func()) {
	t.mu.Lock()
	e.gone = true
	also()
	delete(t.live, id)
	fns := t.onRemove
	t.mu.Unlock()
	for _, fn := range fns {
		fn(id)
	}
}

// OnRemove registers fn, called with the ID of every sandbox Forget
// removes, after Lookup stops finding it (under the sandbox's op lock,
// without the table's: fn must not call back into this sandbox).
func (t *Table) OnRemove(fn func(id string)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onRemove = append(t.onRemove, fn)
}

// OnKill registers fn, called by Killing with the ID of every sandbox
// about to be killed, while it still runs.
func (t *Table) OnKill(fn func(id string)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onKill = append(t.onKill, fn)
}

// Killing calls the OnKill funcs for id (under the sandbox's op lock,
// without the table's).
func (t *Table) Killing(id string) {
	t.mu.RLock()
	fns := t.onKill
	t.mu.RUnlock()
	for _, fn := range fns {
		fn(id)
	}
}

// History is e's resource readings, kept for the metrics API's ranges.
func (t *Table) History(e *Entry) *usage.History { return &e.history }

// LastCPU is e's CPU time at the previous metrics reading, and its time.
func (t *Table) LastCPU(e *Entry) (uint64, time.Time) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return e.lastCPU, e.lastAt
}

// SetLastCPU records e's CPU time at a metrics reading.
func (t *Table) SetLastCPU(e *Entry, cpu uint64, at time.Time) {
	t.mu.Lock()
	e.lastCPU, e.lastAt = cpu, at
	t.mu.Unlock()
}
