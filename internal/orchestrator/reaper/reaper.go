// Package reaper runs the background work of the live sandboxes: each
// running sandbox has a timer for its end and a goroutine blocked in the
// runtime's Wait for its process, so that a sandbox whose time is up or
// whose process died on its own is handled without polling. It owns
// those goroutines and waits for them when stopped; what happens when one
// fires (kill, pause, removal) is the orchestrator's, through Hooks. It
// exists apart from the lifecycle so that the timers, watches and their
// shutdown are one unit keyed by sandbox ID.
package reaper

import (
	"context"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/orchestrator/clock"
	"github.com/moatsh/moat/internal/runtime"
)

// Hooks are what the reaper calls, each in a goroutine of its own that
// Stop waits for.
type Hooks struct {
	// Wait blocks until sandbox id's process ends (runtime.Runtime.Wait).
	Wait func(ctx context.Context, id string) (runtime.ExitStatus, error)
	// Expire is called when the end time of sandbox id came.
	Expire func(ctx context.Context, id string)
	// Died is called when the process of sandbox id's run gen ended while
	// it was tracked; ctx ends when it is untracked.
	Died func(ctx context.Context, id string, gen uint64, st runtime.ExitStatus, waitErr error)
}

// Reaper is safe for concurrent use.
type Reaper struct {
	clock clock.Clock
	hooks Hooks

	// bg is the context of the goroutines the reaper owns: cancelled by
	// Stop; wg counts them. lifeMu guards running (Start called) and
	// closed (Stop called), and wg.Add.
	bg      context.Context
	stopBg  context.CancelFunc
	wg      sync.WaitGroup
	lifeMu  sync.Mutex
	running bool
	closed  bool

	mu      sync.Mutex
	tracked map[string]*tracked // guarded by mu
}

// tracked is one sandbox's timer and process watch.
type tracked struct {
	timer   clock.Timer        // fires at the sandbox's end
	unwatch context.CancelFunc // ends the Wait for its process
}

// New returns a reaper that does nothing before Start.
func New(c clock.Clock, h Hooks) *Reaper {
	bg, stop := context.WithCancel(context.Background())
	return &Reaper{clock: c, hooks: h, bg: bg, stopBg: stop, tracked: map[string]*tracked{}}
}

// Start lets Track arm timers and watches; false when it was started
// before (or stopped).
func (r *Reaper) Start() bool {
	r.lifeMu.Lock()
	defer r.lifeMu.Unlock()
	if r.running || r.closed {
		return false
	}
	r.running = true
	return true
}

// Stop stops every timer and watch and returns once the goroutines the
// reaper started are done. Nothing is tracked afterwards.
func (r *Reaper) Stop() {
	r.lifeMu.Lock()
	r.closed = true
	r.lifeMu.Unlock()
	r.stopBg()
	r.mu.Lock()
	for id := range r.tracked {
		r.untrackLocked(id)
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// spawn runs f in a goroutine that Stop waits for; false (f not run)
// before Start or once stopping.
func (r *Reaper) spawn(f func()) bool {
	r.lifeMu.Lock()
	defer r.lifeMu.Unlock()
	if !r.running || r.closed {
		return false
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		f()
	}()
	return true
}

// Track arms id's timer to fire at end (Hooks.Expire) and watches the
// process of its run gen (Hooks.Died), replacing what id had; between
// Start and Stop only.
func (r *Reaper) Track(id string, gen uint64, end time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.untrackLocked(id)
	r.lifeMu.Lock()
	active := r.running && !r.closed
	r.lifeMu.Unlock()
	if !active {
		return
	}
	t := &tracked{}
	r.tracked[id] = t
	r.armLocked(id, t, end.Sub(r.clock.Now()))
	wctx, cancel := context.WithCancel(r.bg)
	t.unwatch = cancel
	if !r.spawn(func() { defer cancel(); r.watch(wctx, id, gen) }) {
		cancel()
	}
}

// Rearm sets id's timer to fire in d (an end extended after the timer
// fired, a failed kill to retry), keeping its watch.
func (r *Reaper) Rearm(id string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.tracked[id]
	if !ok {
		t = &tracked{}
		r.tracked[id] = t
	}
	r.armLocked(id, t, d)
}

// Untrack stops id's timer and the watch of its process.
func (r *Reaper) Untrack(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.untrackLocked(id)
}

// armLocked sets t's timer to fire in d. Caller holds mu.
func (r *Reaper) armLocked(id string, t *tracked, d time.Duration) {
	if t.timer != nil {
		t.timer.Stop()
	}
	t.timer = r.clock.AfterFunc(d, func() { r.spawn(func() { r.hooks.Expire(r.bg, id) }) })
}

// untrackLocked stops id's timer and watch and forgets it. Caller holds mu.
func (r *Reaper) untrackLocked(id string) {
	t, ok := r.tracked[id]
	if !ok {
		return
	}
	delete(r.tracked, id)
	if t.timer != nil {
		t.timer.Stop()
	}
	if t.unwatch != nil {
		t.unwatch()
	}
}

// watch blocks in Wait for the process of id's run gen and reports its
// end unless the watch was stopped first.
func (r *Reaper) watch(ctx context.Context, id string, gen uint64) {
	st, err := r.hooks.Wait(ctx, id)
	if ctx.Err() != nil {
		return // paused, killed, resumed (a new watch) or shutting down
	}
	r.hooks.Died(ctx, id, gen, st, err)
}
