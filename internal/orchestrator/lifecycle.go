package orchestrator

import (
	"context"
	"fmt"
	"time"

	"github.com/moatsh/moat/internal/admission"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
)

// Kill stops one of team's sandboxes (running or paused) and forgets it.
// ErrNotFound when the ID is unknown or another team's; the runtime's Kill
// is idempotent underneath.
//
// Like Kill, every operation on one sandbox below takes the caller's team
// and answers ErrNotFound for another team's sandbox, as for an unknown ID.
func (o *Orchestrator) Kill(ctx context.Context, team, id string) error {
	e, err := o.entryFor(team, id)
	if err != nil {
		return err
	}
	defer e.op.Unlock()
	return o.killLocked(ctx, e, id)
}

func (o *Orchestrator) killLocked(ctx context.Context, e *entry, id string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
	defer cancel()
	if err := o.rt.Kill(ctx, id); err != nil {
		return fmt.Errorf("kill sandbox %s: %w", id, err)
	}
	if err := o.db.DeleteSandbox(ctx, id); err != nil {
		return err
	}
	o.mu.Lock()
	e.gone = true
	delete(o.live, id)
	o.mu.Unlock()
	o.log.Info("sandbox killed", "sandboxID", id)
	return nil
}

// Pause freezes a running sandbox. ErrConflict when it is not running.
func (o *Orchestrator) Pause(ctx context.Context, team, id string) error {
	e, err := o.entryFor(team, id)
	if err != nil {
		return err
	}
	defer e.op.Unlock()
	// The reaper's auto-pause skips admission: it must not turn into a kill
	// because the server is busy.
	release, err := o.admit(ctx, "pause", admission.Need{})
	if err != nil {
		return err
	}
	defer release()
	return o.pauseLocked(ctx, e)
}

func (o *Orchestrator) pauseLocked(ctx context.Context, e *entry) error {
	sb := o.snapshot(e)
	if sb.State != store.StateRunning {
		return fmt.Errorf("sandbox %s cannot be paused while in '%s' state: %w", sb.ID, sb.State, errdefs.ErrConflict)
	}
	o.setState(ctx, e, store.StatePausing)
	if err := o.rt.Pause(context.WithoutCancel(ctx), sb.ID); err != nil {
		o.setState(ctx, e, store.StateRunning)
		return fmt.Errorf("pause sandbox %s: %w", sb.ID, err)
	}
	sb.State = store.StatePaused
	sb.EndAt = time.Now().UTC()
	if err := o.commit(ctx, e, sb); err != nil {
		return err
	}
	o.log.Info("sandbox paused", "sandboxID", sb.ID)
	return nil
}

// Resume continues a paused sandbox with a new timeout. ErrConflict when it
// is not paused.
func (o *Orchestrator) Resume(ctx context.Context, team, id string, timeout time.Duration) (store.Sandbox, error) {
	if err := o.checkTimeout(timeout); err != nil {
		return store.Sandbox{}, err
	}
	e, err := o.entryFor(team, id)
	if err != nil {
		return store.Sandbox{}, err
	}
	defer e.op.Unlock()
	sb := o.snapshot(e)
	if sb.State != store.StatePaused {
		if sb.State == store.StateRunning {
			return sb, fmt.Errorf("Sandbox %s is already running: %w", id, errdefs.ErrConflict)
		}
		return sb, fmt.Errorf("sandbox %s cannot be resumed while in '%s' state: %w", id, sb.State, errdefs.ErrConflict)
	}
	return o.resumeLocked(ctx, e, sb, timeout)
}

func (o *Orchestrator) resumeLocked(ctx context.Context, e *entry, sb store.Sandbox, timeout time.Duration) (store.Sandbox, error) {
	release, err := o.admit(ctx, "resume", admission.Need{MemoryMiB: sb.MemoryMB})
	if err != nil {
		return sb, err
	}
	defer release()
	// A runtime that tears the network down while paused sets it up again
	// on resume with the current policy (it may have been updated).
	if err := o.applyEgress(ctx, sb); err != nil {
		return sb, fmt.Errorf("resume sandbox %s: %w", sb.ID, err)
	}
	o.setState(ctx, e, store.StateResuming)
	h, resumeErr := o.rt.Resume(context.WithoutCancel(ctx), sb.ID)
	if resumeErr != nil && h == nil {
		o.setState(ctx, e, store.StatePaused)
		return sb, fmt.Errorf("resume sandbox %s: %w", sb.ID, resumeErr)
	}
	// With an error and a handle the sandbox runs again, unhealthy: it is
	// recorded as running; the liveness sweep or a kill takes it from here.
	o.mu.Lock()
	e.addr = h.Addr
	e.gen++
	o.mu.Unlock()
	sb.Addr = h.Addr.String()
	if resumeErr == nil {
		// envd's clock stood still while paused (a VM sets its clock from
		// the RTC; /init refines it). envd keeps its settings in memory,
		// so a failure here is not fatal.
		tc, err := o.db.TemplateConfigOf(ctx, sb.TemplateID)
		if err == nil {
			err = o.initEnvd(ctx, h.Addr, sb, tc, sb.EnvdAccessToken)
		}
		if err != nil {
			o.log.Warn("re-init envd after resume", "sandboxID", sb.ID, "err", err)
		}
	}
	// A resumed sandbox is a new run: its lifetime limit starts again.
	sb.State = store.StateRunning
	sb.StartedAt = time.Now().UTC()
	sb.EndAt = o.capEnd(sb, sb.StartedAt.Add(timeout))
	if err := o.commit(ctx, e, sb); err != nil {
		return sb, err
	}
	if resumeErr != nil {
		o.log.Error("resumed sandbox is not healthy", "sandboxID", sb.ID, "err", resumeErr)
		return sb, fmt.Errorf("resume sandbox %s: %w", sb.ID, resumeErr)
	}
	o.log.Info("sandbox resumed", "sandboxID", sb.ID)
	return sb, nil
}

// Wake is the proxy's auto-resume: it resumes a paused sandbox created with
// auto-resume, giving it its create-time timeout again, and returns its
// route. A sandbox that is already running just returns its route.
//
// Wake acts for no team: the proxy authorises sandbox traffic by the
// sandbox's envd access token, not by API key.
func (o *Orchestrator) Wake(ctx context.Context, id string) (Route, error) {
	e, err := o.anyEntry(id)
	if err != nil {
		return Route{}, err
	}
	defer e.op.Unlock()
	sb := o.snapshot(e)
	switch {
	case sb.State == store.StatePaused && sb.AutoResume:
		timeout := sb.Timeout
		if timeout <= 0 {
			timeout = DefaultTimeout
		}
		if _, err := o.resumeLocked(ctx, e, sb, min(timeout, o.cfg.MaxTimeout)); err != nil {
			return Route{}, err
		}
		o.log.Info("sandbox auto-resumed by traffic", "sandboxID", id)
	case sb.State != store.StateRunning:
		return Route{}, fmt.Errorf("sandbox %s is %s: %w", id, sb.State, errdefs.ErrConflict)
	}
	rt, ok := o.Lookup(id) // o.mu only: fine under e.op
	if !ok {
		return Route{}, errNotFound(id)
	}
	return rt, nil
}

// Connect extends a running sandbox's timeout (never shortening it) or
// resumes a paused one; resumed reports which happened (201 vs 200).
func (o *Orchestrator) Connect(ctx context.Context, team, id string, timeout time.Duration) (sb store.Sandbox, resumed bool, err error) {
	if err := o.checkTimeout(timeout); err != nil {
		return store.Sandbox{}, false, err
	}
	e, err := o.entryFor(team, id)
	if err != nil {
		return store.Sandbox{}, false, err
	}
	defer e.op.Unlock()
	sb = o.snapshot(e)
	switch sb.State {
	case store.StateRunning:
		sb, err = o.extendLocked(ctx, e, sb, timeout)
		return sb, false, err
	case store.StatePaused:
		sb, err = o.resumeLocked(ctx, e, sb, timeout)
		return sb, err == nil, err
	default:
		return sb, false, fmt.Errorf("sandbox %s is %s: %w", id, sb.State, errdefs.ErrConflict)
	}
}

// Refresh extends a running sandbox's timeout by d (at least 15 s).
func (o *Orchestrator) Refresh(ctx context.Context, team, id string, d time.Duration) error {
	d = max(d, 15*time.Second)
	e, err := o.entryFor(team, id)
	if err != nil {
		return err
	}
	defer e.op.Unlock()
	sb := o.snapshot(e)
	if sb.State != store.StateRunning {
		return fmt.Errorf("sandbox %s is %s: %w", id, sb.State, errdefs.ErrConflict)
	}
	_, err = o.extendLocked(ctx, e, sb, d)
	return err
}

// SetTimeout sets a running sandbox's end to now+d; it may shorten it.
// d must be in (0, MaxTimeout]: zero or negative answers ErrInvalidArgument.
func (o *Orchestrator) SetTimeout(ctx context.Context, team, id string, d time.Duration) error {
	if err := o.checkTimeout(d); err != nil {
		return err
	}
	e, err := o.entryFor(team, id)
	if err != nil {
		return err
	}
	defer e.op.Unlock()
	sb := o.snapshot(e)
	if sb.State != store.StateRunning {
		return fmt.Errorf("sandbox %s is %s: %w", id, sb.State, errdefs.ErrConflict)
	}
	if time.Since(sb.StartedAt) >= o.cfg.MaxTimeout {
		return fmt.Errorf("Max instance length exceeded: %w", errdefs.ErrInvalidArgument)
	}
	sb.EndAt = o.capEnd(sb, time.Now().Add(d))
	return o.commit(ctx, e, sb)
}

func (o *Orchestrator) extendLocked(ctx context.Context, e *entry, sb store.Sandbox, d time.Duration) (store.Sandbox, error) {
	end := o.capEnd(sb, time.Now().Add(d))
	if !end.After(sb.EndAt) {
		return sb, nil
	}
	sb.EndAt = end
	err := o.commit(ctx, e, sb)
	return sb, err
}

// capEnd limits an end time to StartedAt + MaxTimeout.
func (o *Orchestrator) capEnd(sb store.Sandbox, end time.Time) time.Time {
	if limit := sb.StartedAt.Add(o.cfg.MaxTimeout); end.After(limit) {
		end = limit
	}
	return end.UTC()
}

// setState records a transition (pausing, resuming, or a revert after a
// failure) in memory and in the store, so that getInfo and list agree while
// it lasts. Caller holds e.op. A store error is logged: the state is
// reconciled with the runtime's at the next start anyway.
func (o *Orchestrator) setState(ctx context.Context, e *entry, st string) {
	o.mu.Lock()
	e.sb.State = st
	sb := e.sb
	o.mu.Unlock()
	if err := o.db.UpdateSandbox(context.WithoutCancel(ctx), sb); err != nil {
		o.log.Warn("record sandbox state", "sandboxID", sb.ID, "state", st, "err", err)
	}
}
