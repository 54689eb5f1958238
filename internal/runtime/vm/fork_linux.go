package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/runtime/vm/freeze"
	"github.com/moatsh/moat/internal/runtime/vm/snapshot"
	"github.com/moatsh/moat/internal/runtime/vm/volserver"
)

// A snapshot taken by Runtime.Snapshot lives in <DataDir>/vm/snapshots/<id>:
// mem (a sparse copy of the sandbox's memory file), state (its device
// state, saved with x-ignore-shared), disk.qcow2 (a copy of its overlay,
// whose backing file is the template's disk) and meta.json. It is written
// as <id>.tmp and renamed when complete; Recover removes leftover .tmp
// directories. Sandboxes created from it copy mem and disk.qcow2, so they
// do not depend on it afterwards.

// Snapshot implements runtime.Snapshotter: the sandbox stops while its memory,
// device state and disk are copied, then continues (its clock and CRNG are
// renewed as after a restore). Errors: ErrInvalidArgument (ids),
// ErrNotFound (sandbox), ErrFailedPrecondition (paused, or created by a
// version without meta.json), ErrAlreadyExists (snapID). On error no
// snapshot exists.
func (r *Runtime) Snapshot(ctx context.Context, id, snapID string) (retErr error) {
	if err := validID(snapID); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	b, meta, err := r.runningBox(id, "snapshot")
	if err != nil {
		return err
	}
	defer b.mu.Unlock()
	dir := r.sandboxDir(id)
	if vs, err := volserver.ReadVolumes(dir); err != nil || len(vs) > 0 {
		return errors.Join(err, errdefs.Publicf(errdefs.ErrInvalidArgument,
			"sandbox %s mounts volumes: snapshots and forks of a sandbox with volumeMounts are not supported", id))
	}
	final := r.snapshotDir(snapID)
	tmp := final + ".tmp"
	if _, err := os.Stat(final); err == nil {
		return fmt.Errorf("snapshot %s: %w", snapID, errdefs.ErrAlreadyExists)
	}
	if err := os.Mkdir(tmp, 0o700); err != nil { // claims snapID against concurrent Snapshots
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("snapshot %s: being taken: %w", snapID, errdefs.ErrAlreadyExists)
		}
		return fmt.Errorf("snapshot %s: %w", snapID, err)
	}
	defer func() {
		if retErr != nil {
			_ = os.RemoveAll(tmp)
		}
	}()
	c, err := r.client(ctx, id, b)
	if err != nil {
		return fmt.Errorf("snapshot sandbox %s: %w", id, err)
	}
	start := time.Now()
	data, err := freeze.Copy(ctx, c, b.proc.Con, dir, tmp, r.o.readyTimeout)
	stopped := time.Since(start)
	if terr := freeze.Thaw(ctx, c, b.proc.Con, r.o.readyTimeout, true); terr != nil {
		err = errors.Join(err, fmt.Errorf("continue sandbox: %w", terr))
	}
	if err != nil {
		return fmt.Errorf("snapshot sandbox %s as %s: %w", id, snapID, err)
	}
	meta.Source, meta.AllowInternet, meta.Created = id, false, time.Now().UTC()
	if err := snapshot.Commit(tmp, final, meta); err != nil {
		return fmt.Errorf("snapshot sandbox %s as %s: %w", id, snapID, err)
	}
	r.log.InfoContext(ctx, "snapshot taken", "sandbox", id, "snapshot", snapID, "stopped", stopped.Round(time.Millisecond),
		"took", time.Since(start).Round(time.Millisecond), "mem_data_mib", data>>20)
	return nil
}

// DeleteSnapshot implements runtime.Snapshotter; unknown IDs succeed. Sandboxes
// created from the snapshot keep running: they hold copies of its files.
func (r *Runtime) DeleteSnapshot(ctx context.Context, snapID string) error {
	if err := validID(snapID); err != nil {
		return fmt.Errorf("delete snapshot: %w", err)
	}
	if err := os.RemoveAll(r.snapshotDir(snapID)); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", snapID, err)
	}
	r.log.InfoContext(ctx, "snapshot deleted", "snapshot", snapID)
	return nil
}

// loadSnapshot returns snapshot snapID for a restore (see
// templatesnap.Set.LoadSnapshot).
func (r *Runtime) loadSnapshot(ctx context.Context, snapID string) (*snapshot.Snapshot, error) {
	if err := validID(snapID); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	return r.tpl.LoadSnapshot(ctx, snapID, r.snapshotDir(snapID))
}
