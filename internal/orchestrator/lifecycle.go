package orchestrator

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/moatsh/moat/internal/admission"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/events"
	"github.com/moatsh/moat/internal/store"
)

// Kill stops one of team's sandboxes (running or paused) and forgets it.
// ErrNotFound when the ID is unknown or another team's; the runtime's Kill
// is idempotent underneath.
//
// Like Kill, every operation on one sandbox below takes the caller's team
// and answers ErrNotFound for another team's sandbox, as for an unknown ID.
func (o *Orchestrator) Kill(ctx context.Context, team, id string) error {
	e, err := o.live.Lock(team, id)
	if err != nil {
		return err
	}
	defer e.Op.Unlock()
	return o.killLocked(ctx, e, id, "request")
}

// killLocked kills sandbox id for reason (the killed event's kill_reason).
func (o *Orchestrator) killLocked(ctx context.Context, e *entry, id, reason string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
	defer cancel()
	sb := o.live.Sandbox(e)
	o.live.Killing(id)
	if err := o.rt.Kill(ctx, id); err != nil {
		return fmt.Errorf("kill sandbox %s: %w", id, err)
	}
	if err := o.db.DeleteSandbox(ctx, id); err != nil {
		return err
	}
	o.forgetLocked(e, id)
	o.emitKilled(ctx, sb, reason)
	o.log.Info("sandbox killed", "sandboxID", id)
	return nil
}

// forgetLocked removes e from the live sandboxes (unroutable, not found),
// stops its timer and watch, and tells OnRemove's hook (the proxy closes
// the sandbox's connections). Caller holds e.Op.
func (o *Orchestrator) forgetLocked(e *entry, id string) {
	o.live.Forget(e, id, func() { o.reaper.Untrack(id) })
}

// Pause freezes a running sandbox with its memory. ErrConflict when it is
// not running.
func (o *Orchestrator) Pause(ctx context.Context, team, id string) error {
	return o.pause(ctx, team, id, false)
}

// PauseFilesystem pauses a running sandbox keeping only its files (E2B's
// memory: false): its processes end, a resume boots it from its disk, and
// traffic does not auto-resume it. ErrNotImplemented on a runtime that
// cannot.
func (o *Orchestrator) PauseFilesystem(ctx context.Context, team, id string) error {
	return o.pause(ctx, team, id, true)
}

func (o *Orchestrator) pause(ctx context.Context, team, id string, filesystem bool) error {
	e, err := o.live.Lock(team, id)
	if err != nil {
		return err
	}
	defer e.Op.Unlock()
	// The reaper's auto-pause skips admission: it must not turn into a kill
	// because the server is busy.
	release, err := o.admit(ctx, admission.Request{Op: "pause", Team: team})
	if err != nil {
		return err
	}
	defer release()
	return o.pauseLocked(ctx, e, filesystem)
}

// pauseLocked pauses e with its memory, or keeping only its files.
func (o *Orchestrator) pauseLocked(ctx context.Context, e *entry, filesystem bool) error {
	sb := o.live.Sandbox(e)
	if sb.State != store.StateRunning {
		return errdefs.Publicf(errdefs.ErrConflict, "sandbox %s cannot be paused while in '%s' state", sb.ID, sb.State)
	}
	if filesystem {
		if err := o.rts.CanPauseFilesystem(sb.ID); err != nil {
			return err
		}
		o.syncFiles(ctx, sb)
	}
	if err := o.commit(ctx, e, withState(sb, store.StatePausing)); err != nil {
		return err
	}
	pause := o.rt.Pause
	if filesystem {
		pause = o.rts.PauseFilesystem
	}
	if err := pause(context.WithoutCancel(ctx), sb.ID); err != nil {
		o.revert(ctx, e, sb)
		return fmt.Errorf("pause sandbox %s: %w", sb.ID, err)
	}
	sb.State, sb.PausedFilesystem = store.StatePaused, filesystem
	sb.EndAt = o.clock.Now().UTC()
	if err := o.commit(ctx, e, sb); err != nil {
		return err
	}
	o.emit(ctx, events.Paused, sb, withMetadata(o.ended(sb), sb))
	return nil
}

// syncFiles has sb's guest write what it caches to its disk before a
// filesystem-only pause (a microVM's page cache goes with its memory). A
// sandbox whose envd does not answer is paused with what its disk has:
// the pause must not fail (the reaper would kill it instead).
func (o *Orchestrator) syncFiles(ctx context.Context, sb store.Sandbox) {
	addr, err := netip.ParseAddr(sb.Addr)
	if err == nil {
		sctx, cancel := context.WithTimeout(ctx, syncTimeout)
		err = o.envd.Sync(sctx, addr, sb.EnvdAccessToken)
		cancel()
	}
	if err != nil {
		o.log.Warn("filesystem pause: sync in the sandbox failed; pausing with what its disk has", "sandboxID", sb.ID, "err", err)
	}
}

// syncTimeout bounds syncFiles.
const syncTimeout = 20 * time.Second

// Resume continues a paused sandbox with a new timeout. ErrConflict when it
// is not paused.
func (o *Orchestrator) Resume(ctx context.Context, team, id string, timeout time.Duration) (store.Sandbox, error) {
	if err := o.checkTimeout(timeout); err != nil {
		return store.Sandbox{}, err
	}
	e, err := o.live.Lock(team, id)
	if err != nil {
		return store.Sandbox{}, err
	}
	defer e.Op.Unlock()
	sb := o.live.Sandbox(e)
	if sb.State != store.StatePaused {
		if sb.State == store.StateRunning {
			return sb, errdefs.Publicf(errdefs.ErrConflict, "Sandbox %s is already running", id)
		}
		return sb, errdefs.Publicf(errdefs.ErrConflict, "sandbox %s cannot be resumed while in '%s' state", id, sb.State)
	}
	return o.resumeLocked(ctx, e, sb, timeout)
}

func (o *Orchestrator) resumeLocked(ctx context.Context, e *entry, sb store.Sandbox, timeout time.Duration) (store.Sandbox, error) {
	release, err := o.admit(ctx, admission.Request{Op: "resume", Team: sb.Team, Need: admission.Need{MemoryMiB: sb.MemoryMB}})
	if err != nil {
		return sb, err
	}
	defer release()
	// A runtime that tears the network down while paused sets it up again
	// on resume with the current policy (it may have been updated).
	if err := o.applyEgress(ctx, sb); err != nil {
		return sb, fmt.Errorf("resume sandbox %s: %w", sb.ID, err)
	}
	if err := o.commit(ctx, e, withState(sb, store.StateResuming)); err != nil {
		return sb, err
	}
	h, resumeErr := o.rt.Resume(context.WithoutCancel(ctx), sb.ID)
	if resumeErr != nil && h == nil {
		o.revert(ctx, e, sb)
		return sb, fmt.Errorf("resume sandbox %s: %w", sb.ID, resumeErr)
	}
	// With an error and a handle the sandbox runs again, unhealthy: it is
	// recorded as running; the watch of its process or a kill takes it
	// from here.
	o.live.Moved(e, h.Addr)
	sb.Addr = h.Addr.String()
	if resumeErr == nil {
		// envd's clock stood still while paused (a VM sets its clock from
		// the RTC; /init refines it). envd keeps its settings in memory,
		// so a failure here is not fatal.
		tc, err := o.db.TemplateConfigOf(ctx, sb.TemplateID)
		if err == nil {
			err = o.envd.Init(ctx, h.Addr, sb, tc, sb.EnvdAccessToken)
		}
		if err != nil {
			o.log.Warn("re-init envd after resume", "sandboxID", sb.ID, "err", err)
		}
	}
	// A resumed sandbox is a new run: its lifetime limit starts again.
	sb.State, sb.PausedFilesystem = store.StateRunning, false
	sb.StartedAt = o.clock.Now().UTC()
	sb.EndAt = o.capEnd(sb, sb.StartedAt.Add(timeout))
	if err := o.commit(ctx, e, sb); err != nil {
		return sb, err
	}
	o.emit(ctx, events.Resumed, sb, withMetadata(nil, sb))
	if resumeErr != nil {
		o.log.Error("resumed sandbox is not healthy", "sandboxID", sb.ID, "err", resumeErr)
		return sb, fmt.Errorf("resume sandbox %s: %w", sb.ID, resumeErr)
	}
	return sb, nil
}

// Wake is the proxy's auto-resume: it resumes a paused sandbox created with
// auto-resume, giving it its create-time timeout again, and returns its
// route. A sandbox that is already running just returns its route.
//
// Wake acts for no team: the proxy authorises sandbox traffic by the
// sandbox's envd access token, not by API key.
func (o *Orchestrator) Wake(ctx context.Context, id string) (Route, error) {
	e, err := o.live.LockAny(id)
	if err != nil {
		return Route{}, err
	}
	defer e.Op.Unlock()
	sb := o.live.Sandbox(e)
	switch {
	case sb.State == store.StatePaused && sb.PausedFilesystem:
		return Route{}, errdefs.Publicf(errdefs.ErrConflict, "sandbox %s was paused without its memory and is not resumed by traffic; resume it with connect", id)
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
		return Route{}, errdefs.Publicf(errdefs.ErrConflict, "sandbox %s is %s", id, sb.State)
	}
	rt, ok := o.Lookup(id) // the table's lock only: fine under e.Op
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
	e, err := o.live.Lock(team, id)
	if err != nil {
		return store.Sandbox{}, false, err
	}
	defer e.Op.Unlock()
	sb = o.live.Sandbox(e)
	switch sb.State {
	case store.StateRunning:
		sb, err = o.extendLocked(ctx, e, sb, timeout)
		return sb, false, err
	case store.StatePaused:
		sb, err = o.resumeLocked(ctx, e, sb, timeout)
		return sb, err == nil, err
	default:
		return sb, false, errdefs.Publicf(errdefs.ErrConflict, "sandbox %s is %s", id, sb.State)
	}
}

// Refresh extends a running sandbox's timeout by d (at least 15 s).
func (o *Orchestrator) Refresh(ctx context.Context, team, id string, d time.Duration) error {
	d = max(d, 15*time.Second)
	e, err := o.live.Lock(team, id)
	if err != nil {
		return err
	}
	defer e.Op.Unlock()
	sb := o.live.Sandbox(e)
	if sb.State != store.StateRunning {
		return errdefs.Publicf(errdefs.ErrConflict, "sandbox %s is %s", id, sb.State)
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
	e, err := o.live.Lock(team, id)
	if err != nil {
		return err
	}
	defer e.Op.Unlock()
	sb := o.live.Sandbox(e)
	if sb.State != store.StateRunning {
		return errdefs.Publicf(errdefs.ErrConflict, "sandbox %s is %s", id, sb.State)
	}
	if o.clock.Now().Sub(sb.StartedAt) >= o.cfg.MaxTimeout {
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "Max instance length exceeded")
	}
	sb.EndAt = o.capEnd(sb, o.clock.Now().Add(d))
	if err := o.commit(ctx, e, sb); err != nil {
		return err
	}
	o.emitTimeout(ctx, sb)
	return nil
}

func (o *Orchestrator) extendLocked(ctx context.Context, e *entry, sb store.Sandbox, d time.Duration) (store.Sandbox, error) {
	end := o.capEnd(sb, o.clock.Now().Add(d))
	if !end.After(sb.EndAt) {
		return sb, nil
	}
	sb.EndAt = end
	if err := o.commit(ctx, e, sb); err != nil {
		return sb, err
	}
	o.emitTimeout(ctx, sb)
	return sb, nil
}

// capEnd limits an end time to StartedAt + MaxTimeout.
func (o *Orchestrator) capEnd(sb store.Sandbox, end time.Time) time.Time {
	if limit := sb.StartedAt.Add(o.cfg.MaxTimeout); end.After(limit) {
		end = limit
	}
	return end.UTC()
}

// commit is the one transition function: it checks that sb.State may
// follow e's state (store.State.CanBecome: the edges are there), persists sb, mirrors it in memory, logs a change of
// state, and re-arms e's timeout timer and process watch (a running
// sandbox has both, any other neither). A change of the end time or the
// network policy is a commit in the same state. Caller holds e.Op.
func (o *Orchestrator) commit(ctx context.Context, e *entry, sb store.Sandbox) error {
	from := o.live.Sandbox(e).State
	if !from.CanBecome(sb.State) {
		return fmt.Errorf("sandbox %s cannot go from '%s' to '%s': %w", sb.ID, from, sb.State, errdefs.ErrConflict)
	}
	if err := o.db.UpdateSandbox(context.WithoutCancel(ctx), sb); err != nil {
		return fmt.Errorf("record sandbox %s %s: %w", sb.ID, sb.State, err)
	}
	o.live.Set(e, sb)
	if from != sb.State {
		o.log.Info("sandbox "+string(sb.State), "sandboxID", sb.ID, "from", from)
	}
	o.track(e)
	return nil
}

// revert commits sb (the record before a failed pause or resume) again; a
// store error is logged: the state is reconciled with the runtime's at the
// next start anyway.
func (o *Orchestrator) revert(ctx context.Context, e *entry, sb store.Sandbox) {
	if err := o.commit(ctx, e, sb); err != nil {
		o.log.Warn("revert sandbox state", "sandboxID", sb.ID, "state", sb.State, "err", err)
	}
}

// withState is sb in state st.
func withState(sb store.Sandbox, st store.State) store.Sandbox {
	sb.State = st
	return sb
}
