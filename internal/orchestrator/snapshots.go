package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/admission"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/events"
	"github.com/moatsh/moat/internal/orchestrator/sandboxspec"
	"github.com/moatsh/moat/internal/randid"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
)

// Snapshot saves a running sandbox's memory and disk as a new snapshot
// (named name when not empty) from which sandboxes can be created; the
// sandbox keeps running. ErrNotImplemented when the runtime has none.
// The snapshot belongs to team, whose sandbox id must be.
func (o *Orchestrator) Snapshot(ctx context.Context, team, id, name string) (store.Snapshot, error) {
	// An unknown sandbox is 404 whatever the runtime can do, as on every
	// other sandbox route.
	e, err := o.live.Lock(team, id)
	if err != nil {
		return store.Snapshot{}, err
	}
	defer e.Op.Unlock()
	sn, err := o.snapshotter()
	if err != nil {
		return store.Snapshot{}, err
	}
	if name != "" {
		if _, err := o.db.GetSnapshot(ctx, team, name); err == nil {
			return store.Snapshot{}, errdefs.Publicf(errdefs.ErrConflict, "snapshot %q already exists", name)
		}
	}
	sb := o.live.Sandbox(e)
	if sb.State != store.StateRunning {
		return store.Snapshot{}, errdefs.Publicf(errdefs.ErrConflict, "sandbox %s cannot be snapshotted while in '%s' state", id, sb.State)
	}
	if err := sandboxspec.CheckSnapshotVolumes(sb); err != nil {
		return store.Snapshot{}, err
	}
	snap := store.Snapshot{ID: "snap" + randid.New(16), Team: sb.Team, Name: name, SandboxID: id, TemplateID: sb.TemplateID,
		Alias: sb.Alias, Runtime: sb.Runtime, CPUCount: sb.CPUCount, MemoryMB: sb.MemoryMB,
		DiskSizeMB: sb.DiskSizeMB, EnvVars: sb.EnvVars, EnvdAccessToken: sb.EnvdAccessToken}
	release, err := o.admit(ctx, admission.Request{Op: "snapshot", Team: team})
	if err != nil {
		return store.Snapshot{}, err
	}
	defer release()
	start := time.Now()
	if err := sn.Snapshot(context.WithoutCancel(ctx), id, snap.ID); err != nil {
		return store.Snapshot{}, fmt.Errorf("snapshot sandbox %s: %w", id, err)
	}
	snap.CreatedAt = time.Now().UTC()
	if err := o.db.InsertSnapshot(context.WithoutCancel(ctx), snap); err != nil {
		if derr := sn.DeleteSnapshot(context.WithoutCancel(ctx), snap.ID); derr != nil {
			o.log.Error("remove unrecorded snapshot", "snapshotID", snap.ID, "err", derr)
		}
		if errors.Is(err, errdefs.ErrAlreadyExists) {
			return store.Snapshot{}, errdefs.Publicf(errdefs.ErrConflict, "snapshot %q already exists", name)
		}
		return store.Snapshot{}, err
	}
	o.emit(ctx, events.Checkpointed, sb, withMetadata(map[string]any{"snapshot_id": snap.ID}, sb))
	o.log.Info("snapshot taken", "sandboxID", id, "snapshotID", snap.ID, "took", time.Since(start).Round(time.Millisecond))
	return snap, nil
}

// snapshotter returns the runtimes' snapshotter (it routes by sandbox)
// when one of them takes snapshots.
func (o *Orchestrator) snapshotter() (runtime.Snapshotter, error) {
	for _, n := range o.rts.Names() {
		if o.rts.Snapshots(n) {
			return o.rts, nil
		}
	}
	return nil, errdefs.Publicf(errdefs.ErrNotImplemented, "the %s runtime cannot snapshot sandboxes (use the vm runtime)", o.rt.Name())
}

// ListSnapshots returns team's snapshots newest first; f.Team is overridden.
func (o *Orchestrator) ListSnapshots(ctx context.Context, team string, f store.SnapshotFilter) ([]store.Snapshot, error) {
	if team == "" {
		return nil, errNoTeam
	}
	f.Team = team
	return o.db.ListSnapshots(ctx, f)
}

// DeleteSnapshot removes a snapshot by ID or name; sandboxes created from it
// are not affected; one being created from it is waited for. ErrNotFound
// when team has none by that reference.
func (o *Orchestrator) DeleteSnapshot(ctx context.Context, team, ref string) error {
	if team == "" {
		return errNoTeam
	}
	o.snapUse.Lock()
	defer o.snapUse.Unlock()
	s, err := o.db.GetSnapshot(ctx, team, ref)
	if err != nil {
		return err
	}
	sn, err := o.snapshotter()
	if err != nil {
		return err
	}
	if err := sn.DeleteSnapshot(ctx, s.ID); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", s.ID, err)
	}
	if err := o.db.DeleteSnapshot(ctx, s.ID); err != nil {
		return err
	}
	o.log.Info("snapshot deleted", "snapshotID", s.ID)
	return nil
}

// MaxForks bounds one fork call (E2B's limit).
const MaxForks = 100

// forkParallel bounds how many forks start at once.
const forkParallel = 4

// ForkResult is the outcome of one fork: a sandbox or the error that
// prevented it from starting.
type ForkResult struct {
	Sandbox store.Sandbox
	Err     error
}

// Fork snapshots a running sandbox once (it keeps running) and starts count
// sandboxes from that snapshot, each with the given timeout and the
// source's settings; the snapshot is deleted afterwards. The forks belong
// to team, whose sandbox id must be. The error is set only when no fork
// could be attempted.
func (o *Orchestrator) Fork(ctx context.Context, team, id string, count int, timeout time.Duration) ([]ForkResult, error) {
	if count < 1 || count > MaxForks {
		return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "count must be between 1 and %d", MaxForks)
	}
	if err := o.checkTimeout(timeout); err != nil {
		return nil, err
	}
	src, err := o.Get(ctx, team, id)
	if err != nil {
		return nil, err
	}
	snap, err := o.Snapshot(ctx, team, id, "")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := o.DeleteSnapshot(context.WithoutCancel(ctx), team, snap.ID); err != nil {
			o.log.Error("delete fork snapshot", "snapshotID", snap.ID, "err", err)
		}
	}()
	req := CreateRequest{Team: team, Template: snap.ID, Timeout: timeout, Metadata: src.Metadata, Secure: src.Secure,
		AllowInternet: src.AllowInternet, AutoPause: src.AutoPause, AutoResume: src.AutoResume, AutoPauseFS: src.AutoPauseFilesystem,
		AllowOut: src.Network.AllowOut, DenyOut: src.Network.DenyOut, Rules: src.Network.Rules,
		PrivateTraffic: src.Network.TrafficAccessToken != ""}
	out := make([]ForkResult, count)
	sem := make(chan struct{}, forkParallel)
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i].Sandbox, out[i].Err = o.Create(ctx, req)
		}()
	}
	wg.Wait()
	return out, nil
}
