package orchestrator

import (
	"context"
	"time"

	"github.com/moatsh/moat/internal/store"
)

// reapInterval bounds how late after EndAt a sandbox is stopped.
const reapInterval = 250 * time.Millisecond

// Run stops expired sandboxes (kill, or pause when autoPause) until ctx ends.
func (o *Orchestrator) Run(ctx context.Context) {
	t := time.NewTicker(reapInterval)
	defer t.Stop()
	live := time.NewTicker(livenessInterval)
	defer live.Stop()
	checking := make(chan struct{}, 1) // at most one liveness sweep at a time
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			o.reapOnce(ctx, now)
		case <-live.C:
			select {
			case checking <- struct{}{}:
				go func() {
					defer func() { <-checking }()
					o.checkLiveness(ctx)
				}()
			default:
			}
		}
	}
}

func (o *Orchestrator) reapOnce(ctx context.Context, now time.Time) {
	var due []*entry
	o.mu.Lock()
	for _, e := range o.live {
		if e.reaping || e.gone || e.sb.State != store.StateRunning || e.sb.EndAt.After(now) {
			continue
		}
		e.reaping = true
		due = append(due, e)
	}
	o.mu.Unlock()
	for _, e := range due {
		go o.expire(ctx, e)
	}
}

// expire stops one sandbox whose time is up, rechecking under its op lock
// because an API call may have extended or killed it meanwhile.
func (o *Orchestrator) expire(ctx context.Context, e *entry) {
	e.op.Lock()
	defer e.op.Unlock()
	defer func() {
		o.mu.Lock()
		e.reaping = false
		o.mu.Unlock()
	}()
	o.mu.RLock()
	sb, gone := e.sb, e.gone
	o.mu.RUnlock()
	if gone || sb.State != store.StateRunning || sb.EndAt.After(time.Now()) {
		return
	}
	log := o.log.With("sandboxID", sb.ID)
	if sb.AutoPause {
		if err := o.pauseLocked(ctx, e); err == nil {
			log.Info("sandbox timed out: paused")
			return
		} else {
			log.Error("auto-pause failed; killing", "err", err)
		}
	}
	if err := o.killLocked(ctx, e, sb.ID); err != nil {
		log.Error("kill on timeout", "err", err)
		return
	}
	log.Info("sandbox timed out: killed")
}
