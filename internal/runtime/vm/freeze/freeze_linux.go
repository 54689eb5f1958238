// Package freeze stops a running guest into its sandbox directory and
// continues it again: the pause file protocol of the vm runtime and the
// link change that makes moat-vminit renew its CRNG and clock afterwards.
// It exists so that Pause, Snapshot and Fork share one way of freezing a
// guest, apart from the runtime's bookkeeping.
//
// A sandbox paused to disk is its directory: mem (guest RAM, which QEMU maps
// shared, so it is always current), disk.qcow2, meta.json and state, the
// device state saved with x-ignore-shared while the guest was stopped.
// state exists exactly while mem and state belong together, so it decides
// after a crash whether a sandbox is paused (see the runtime's Recover):
//
//	pause:  stop → state.tmp → fdatasync mem, disk, state.tmp → rename to state → fsync dir → quit QEMU
//	resume: start QEMU → load state → remove state, fsync dir → cont
//
// Before the rename a crash leaves a stopped QEMU that Recover continues;
// after it, a paused sandbox. Resume removes state before the guest runs
// again, so a crash after that leaves a running VM, before it a paused one.
package freeze

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/moatsh/moat/internal/guestinit"
	"github.com/moatsh/moat/internal/qmp"
	"github.com/moatsh/moat/internal/runtime/vm/memfile"
	"github.com/moatsh/moat/internal/runtime/vm/qemu"
	"github.com/moatsh/moat/internal/sparse"
)

// Times are the milestones of a pause, for the log, and the bytes it
// wrote (memory pages dirty when it synced, the state file). The caller
// sets Start, Committed and Quit.
type Times struct {
	Start, LinkDown, Saved, Synced, Committed, Quit time.Time
	Written                                         int64
}

// Save freezes the guest into dir/state (see the package comment),
// waiting at most timeout for the guest to see its link go down; on error
// dir/state does not exist and QEMU still runs, stopped.
func Save(ctx context.Context, c *qmp.Client, con *qemu.Console, dir string, timeout time.Duration, t *Times) error {
	tmp, state := filepath.Join(dir, "state.tmp"), filepath.Join(dir, "state")
	if err := Freeze(ctx, c, con, tmp, timeout, t); err != nil {
		return err
	}
	t.Saved = time.Now()
	t.Written = memfile.UnsyncedBytes(filepath.Join(dir, "mem"), filepath.Join(dir, "disk.qcow2"), tmp)
	if err := memfile.SyncFiles(filepath.Join(dir, "mem"), filepath.Join(dir, "disk.qcow2"), tmp); err != nil {
		return err
	}
	t.Synced = time.Now()
	if err := os.Rename(tmp, state); err != nil {
		return fmt.Errorf("commit state: %w", err)
	}
	if err := memfile.SyncDir(dir); err != nil {
		_ = os.Remove(state)
		return err
	}
	return nil
}

// Consume removes dir/state before the guest runs again (mem no longer
// matches it then) and makes that durable. consumed reports whether state
// is gone: after an error with consumed false the sandbox is still paused.
func Consume(dir string) (consumed bool, _ error) {
	if err := os.Remove(filepath.Join(dir, "state")); err != nil {
		return false, fmt.Errorf("consume state: %w", err)
	}
	return true, memfile.SyncDir(dir)
}

// Copy freezes the guest in dir and copies its device state, memory and
// disk into dst (a snapshot's directory) and returns the memory data
// copied. The copies need not be durable yet: they do not change once the
// guest runs again (Thaw). timeout is Freeze's.
func Copy(ctx context.Context, c *qmp.Client, con *qemu.Console, dir, dst string, timeout time.Duration) (int64, error) {
	if err := Freeze(ctx, c, con, filepath.Join(dst, "state"), timeout, nil); err != nil {
		return 0, err
	}
	n, err := sparse.Copy(filepath.Join(dir, "mem"), filepath.Join(dst, "mem"))
	if err != nil {
		return 0, err
	}
	// The migration inactivated the disk, so its qcow2 metadata is written
	// out; its backing file (the template's disk) stays where it is.
	if _, err := sparse.Copy(filepath.Join(dir, "disk.qcow2"), filepath.Join(dst, "disk.qcow2")); err != nil {
		return 0, err
	}
	return n, nil
}

// Freeze cuts the guest's link (moat-vminit notes it, so that raising it
// again makes the guest renew its CRNG and clock as after a restore), stops
// the vCPUs and saves the device state to path; RAM stays in the memory
// file. t may be nil.
func Freeze(ctx context.Context, c *qmp.Client, con *qemu.Console, path string, timeout time.Duration, t *Times) error {
	down := con.Watch(guestinit.LinkDownMarker)
	defer down.Stop()
	if err := qemu.SetLink(ctx, c, false); err != nil {
		return err
	}
	if err := down.Wait(ctx, timeout); err != nil {
		return err
	}
	if t != nil {
		t.LinkDown = time.Now()
	}
	if err := qemu.SaveState(ctx, c, path); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	return nil
}

// Thaw continues a guest stopped by Freeze (also after the migration
// completed: cont reactivates the block devices) and raises its link; with
// wait it waits until the guest renewed its CRNG and clock. It runs even
// when ctx is cancelled, for at most timeout.
func Thaw(ctx context.Context, c *qmp.Client, con *qemu.Console, timeout time.Duration, wait bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	restored := con.Watch(guestinit.RestoredMarker)
	defer restored.Stop()
	if err := c.Execute(ctx, "cont", nil, nil); err != nil {
		return err
	}
	if err := qemu.SetLink(ctx, c, true); err != nil {
		return err
	}
	if !wait {
		return nil
	}
	return restored.Wait(ctx, timeout)
}
