package orchestrator

import (
	"context"
	"time"

	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
)

// expireRetry is how soon a timeout whose kill failed is tried again.
const expireRetry = 5 * time.Second

// Run serves the sandboxes' timeouts and deaths, and collects their
// metrics (metrics.go), until ctx ends: each
// running sandbox has a timer for its end (kill, or pause when autoPause)
// and a goroutine blocked in the runtime's Wait for its process, which
// removes a sandbox that died on its own (a guest kernel panic, an
// OOM-killed init, a crashed QEMU); package reaper runs them. Before Run
// nothing fires; when ctx ends Run stops every timer and returns once the
// goroutines it started are done, so that the store can close after it.
// Run runs once.
func (o *Orchestrator) Run(ctx context.Context) {
	if !o.reaper.Start() {
		return
	}
	for _, e := range o.live.All() {
		o.track(e)
	}
	collected := make(chan struct{})
	go func() { defer close(collected); o.collect(ctx) }() // metrics.go
	<-ctx.Done()
	o.reaper.Stop()
	<-collected
}

// track arms e's timeout timer and watches its process when it runs, and
// disarms both otherwise. Called after every change of e's state or end.
func (o *Orchestrator) track(e *entry) {
	o.live.Watch(e, func(sb store.Sandbox, gen uint64, gone bool) {
		if gone || sb.State != store.StateRunning {
			o.reaper.Untrack(sb.ID)
			return
		}
		o.reaper.Track(sb.ID, gen, sb.EndAt)
	})
}

// expire stops one sandbox whose time is up, rechecking under its op lock
// because an API call may have extended or killed it meanwhile.
func (o *Orchestrator) expire(ctx context.Context, id string) {
	e := o.live.Find(id)
	if e == nil {
		return
	}
	e.Op.Lock()
	defer e.Op.Unlock()
	sb, _, gone := o.live.Read(e)
	if gone || sb.State != store.StateRunning {
		return
	}
	if left := sb.EndAt.Sub(o.clock.Now()); left > 0 { // extended after the timer fired
		o.reaper.Rearm(sb.ID, left)
		return
	}
	log := o.log.With("sandboxID", sb.ID)
	if sb.AutoPause {
		if err := o.pauseLocked(ctx, e, sb.AutoPauseFilesystem); err == nil {
			log.Info("sandbox timed out: paused")
			return
		} else {
			log.Error("auto-pause failed; killing", "err", err)
		}
	}
	if err := o.killLocked(ctx, e, sb.ID, "timeout"); err != nil {
		log.Error("kill on timeout; retrying", "err", err, "in", expireRetry)
		o.reaper.Rearm(sb.ID, expireRetry)
		return
	}
	log.Info("sandbox timed out: killed")
}

// died removes a sandbox that stopped on its own, rechecking under its op
// lock: a concurrent kill, pause or resume may have changed it meanwhile.
func (o *Orchestrator) died(ctx context.Context, id string, gen uint64, st runtime.ExitStatus, waitErr error) {
	e := o.live.Find(id)
	if e == nil {
		return
	}
	e.Op.Lock()
	defer e.Op.Unlock()
	sb, cur, gone := o.live.Read(e)
	if gone || cur != gen || sb.State != store.StateRunning {
		return
	}
	// Gone for the API and the proxy at once; the cleanup follows. Should
	// it fail, the row is deleted anyway: the next start's Recover removes
	// what is left of a sandbox the store does not list.
	o.forgetLocked(e, sb.ID)
	o.emitKilled(ctx, sb, "exited")
	log := o.log.With("sandboxID", sb.ID)
	log.Warn("sandbox died on its own: removed", "status", st.String(), "oom", st.OOMKilled, "waitErr", waitErr)
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
	defer cancel()
	if err := o.rt.Kill(kctx, sb.ID); err != nil {
		log.Error("clean up dead sandbox", "err", err)
	}
	if err := o.db.DeleteSandbox(kctx, sb.ID); err != nil {
		log.Error("delete dead sandbox's row", "err", err)
	}
}
