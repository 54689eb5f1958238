package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/moatsh/moat/internal/cgroups"
	"github.com/moatsh/moat/internal/cleanup"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/qmp"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/vm/guestenvd"
	"github.com/moatsh/moat/internal/runtime/vm/guestinit"
	"github.com/moatsh/moat/internal/runtime/vm/launch"
	"github.com/moatsh/moat/internal/runtime/vm/memfile"
	"github.com/moatsh/moat/internal/runtime/vm/qemu"
	"github.com/moatsh/moat/internal/runtime/vm/snapshot"
)

// A sandbox paused to disk is its directory: mem (guest RAM, which QEMU maps
// shared, so it is always current), disk.qcow2, meta.json and state, the
// device state saved with x-ignore-shared while the guest was stopped.
// state exists exactly while mem and state belong together, so it decides
// after a crash whether a sandbox is paused (see Recover):
//
//	pause:  stop → state.tmp → fdatasync mem, disk, state.tmp → rename to state → fsync dir → quit QEMU
//	resume: start QEMU → load state → remove state, fsync dir → cont
//
// Before the rename a crash leaves a stopped QEMU that Recover continues;
// after it, a paused sandbox. Resume removes state before the guest runs
// again, so a crash after that leaves a running VM, before it a paused one.

// Features implements runtime.Runtime: pauses go to disk.
func (r *Runtime) Features() runtime.Features { return runtime.Features{PauseToDisk: true} }

// lockBox returns id's bookkeeping with b.mu held, for an operation (op)
// on a created sandbox. Errors: ErrInvalidArgument, ErrNotFound.
func (r *Runtime) lockBox(id, op string) (*sandbox, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	b, ok := r.boxes.Lookup(id)
	if !ok {
		return nil, fmt.Errorf("%s sandbox %s: %w", op, id, errdefs.ErrNotFound)
	}
	b.mu.Lock()
	if !b.created {
		b.mu.Unlock()
		return nil, fmt.Errorf("%s sandbox %s: %w", op, id, errdefs.ErrNotFound)
	}
	return b, nil
}

// runningBox is lockBox for operations that need a running sandbox with a
// meta.json (one created by this version); it returns the meta too.
func (r *Runtime) runningBox(id, op string) (*sandbox, *snapshot.Meta, error) {
	b, err := r.lockBox(id, op)
	if err != nil {
		return nil, nil, err
	}
	if b.paused {
		b.mu.Unlock()
		return nil, nil, fmt.Errorf("%s sandbox %s: paused: %w", op, id, errdefs.ErrFailedPrecondition)
	}
	meta, err := snapshot.ReadMeta(r.sandboxDir(id))
	if err != nil {
		b.mu.Unlock()
		return nil, nil, fmt.Errorf("%s sandbox %s: %v (created by an older version?): %w", op, id, err, errdefs.ErrFailedPrecondition)
	}
	return b, meta, nil
}

// Pause implements runtime.Runtime: the guest's device state is saved next
// to its memory file, then QEMU exits and the sandbox's network and cgroup
// go; its directory stays. The sandbox keeps no RAM or process until
// Resume. A pause that fails leaves the sandbox running. Errors:
// ErrNotFound, ErrFailedPrecondition (already paused, or created by a
// version without meta.json).
func (r *Runtime) Pause(ctx context.Context, id string) error {
	b, _, err := r.runningBox(id, "pause")
	if err != nil {
		return err
	}
	defer b.mu.Unlock()
	dir := r.sandboxDir(id)
	c, err := r.client(ctx, id, b)
	if err != nil {
		return fmt.Errorf("pause sandbox %s: %w", id, err)
	}
	var pt pauseTimes
	pt.start = time.Now()
	if err := r.savePaused(ctx, c, b.proc.Con, dir, &pt); err != nil {
		_ = os.Remove(filepath.Join(dir, "state.tmp"))
		if terr := r.thaw(ctx, c, b.proc.Con, false); terr != nil {
			err = errors.Join(err, fmt.Errorf("continue after the failed pause: %w", terr))
		}
		return fmt.Errorf("pause sandbox %s: %w", id, err)
	}
	pt.committed = time.Now()
	// The pause is complete: what fails from here on is left for Kill,
	// which removes everything by name.
	if err := r.release(ctx, id, b, &pt); err != nil {
		r.log.WarnContext(ctx, "sandbox paused; cleanup incomplete", "sandbox", id, "err", err)
	}
	b.paused = true
	b.pauseWritten = pt.written
	b.handle = &runtime.Handle{ID: id, Runtime: Name, Paused: true}
	ms := func(a, b time.Time) time.Duration { return b.Sub(a).Round(time.Millisecond) }
	r.log.InfoContext(ctx, "sandbox paused", "sandbox", id, "took", time.Since(pt.start).Round(time.Millisecond),
		"link_down", ms(pt.start, pt.linkDown), "save", ms(pt.linkDown, pt.saved), "sync", ms(pt.saved, pt.synced),
		"commit", ms(pt.synced, pt.committed), "quit", ms(pt.committed, pt.quit), "teardown", time.Since(pt.quit).Round(time.Millisecond),
		"written_kib", pt.written>>10)
	return nil
}

// pauseTimes are the milestones of a pause, for the log, and the bytes it
// wrote (memory pages dirty when it synced, the state file).
type pauseTimes struct {
	start, linkDown, saved, synced, committed, quit time.Time
	written                                         int64
}

// savePaused freezes the guest into dir/state (see the file comment); on
// error dir/state does not exist and QEMU still runs, stopped.
func (r *Runtime) savePaused(ctx context.Context, c *qmp.Client, con *qemu.Console, dir string, pt *pauseTimes) error {
	tmp, state := filepath.Join(dir, "state.tmp"), filepath.Join(dir, "state")
	if err := r.freeze(ctx, c, con, tmp, pt); err != nil {
		return err
	}
	pt.saved = time.Now()
	pt.written = memfile.UnsyncedBytes(filepath.Join(dir, "mem"), filepath.Join(dir, "disk.qcow2"), tmp)
	if err := memfile.SyncFiles(filepath.Join(dir, "mem"), filepath.Join(dir, "disk.qcow2"), tmp); err != nil {
		return err
	}
	pt.synced = time.Now()
	if err := os.Rename(tmp, state); err != nil {
		return fmt.Errorf("commit state: %w", err)
	}
	if err := memfile.SyncDir(dir); err != nil {
		_ = os.Remove(state)
		return err
	}
	return nil
}

// freeze cuts the guest's link (moat-vminit notes it, so that raising it
// again makes the guest renew its CRNG and clock as after a restore), stops
// the vCPUs and saves the device state to path; RAM stays in the memory file.
func (r *Runtime) freeze(ctx context.Context, c *qmp.Client, con *qemu.Console, path string, pt *pauseTimes) error {
	down := con.Watch(guestinit.LinkDownMarker)
	defer down.Stop()
	if err := qemu.SetLink(ctx, c, false); err != nil {
		return err
	}
	if err := down.Wait(ctx, r.o.readyTimeout); err != nil {
		return err
	}
	pt.linkDown = time.Now()
	if err := qemu.SaveState(ctx, c, path); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	return nil
}

// thaw continues a guest stopped by freeze (also after the migration
// completed: cont reactivates the block devices) and raises its link; with
// wait it waits until the guest renewed its CRNG and clock.
func (r *Runtime) thaw(ctx context.Context, c *qmp.Client, con *qemu.Console, wait bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.o.readyTimeout)
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
	return restored.Wait(ctx, r.o.readyTimeout)
}

// release quits a paused sandbox's QEMU and removes its network and cgroup
// (noting when QEMU was gone in pt); afterwards b.undo holds the by-name
// undos of Kill. b.mu is held.
func (r *Runtime) release(ctx context.Context, id string, b *sandbox, pt *pauseTimes) error {
	ctx = context.WithoutCancel(ctx)
	r.flush.Remove(filepath.Join(r.sandboxDir(id), "mem"))
	var errs []error
	if b.proc != nil {
		errs = append(errs, b.proc.Stop(ctx, b.qmp))
	}
	pt.quit = time.Now()
	if b.qmp != nil {
		b.qmp.Close()
	}
	b.proc, b.qmp = nil, nil
	errs = append(errs, r.stopVolumes(id, b)) // the guest is saved: nothing calls it until the resume starts another
	errs = append(errs, r.net.Teardown(ctx, id), cgroups.Remove(r.cgroupPath(id)), qemu.UnmountLog(r.sandboxDir(id)))
	for _, f := range []string{"qmp.sock", "pid", "console.sock"} {
		_ = os.Remove(filepath.Join(r.sandboxDir(id), f))
	}
	b.undo = cleanup.Stack{} // its undos were for the QEMU that just quit
	r.pushAll(ctx, id, b)
	return errors.Join(errs...)
}

// Resume implements runtime.Runtime: a new QEMU in a new network namespace
// (the address may change) loads the saved state over the sandbox's memory
// file and continues. It works for sandboxes paused by an earlier process
// (after Recover). If it fails before the guest ran, the sandbox stays
// paused (nil handle); after, the handle comes with the error: the VM runs.
// Errors: ErrNotFound, ErrFailedPrecondition (not paused, or its state or
// meta.json is missing).
func (r *Runtime) Resume(ctx context.Context, id string) (*runtime.Handle, error) {
	b, err := r.lockBox(id, "resume")
	if err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	if !b.paused {
		return nil, fmt.Errorf("resume sandbox %s: not paused: %w", id, errdefs.ErrFailedPrecondition)
	}
	dir := r.sandboxDir(id)
	meta, err := snapshot.ReadMeta(dir)
	if err != nil {
		return nil, fmt.Errorf("resume sandbox %s: %v: %w", id, err, errdefs.ErrFailedPrecondition)
	}
	if _, err := os.Stat(r.statePath(id)); err != nil {
		return nil, fmt.Errorf("resume sandbox %s: saved state: %v: %w", id, err, errdefs.ErrFailedPrecondition)
	}
	_ = os.Rename(filepath.Join(dir, "console.log"), filepath.Join(dir, "console.log.1"))
	start := time.Now()
	var undo cleanup.Stack
	h, consumed, err := r.resumeVM(ctx, id, b, meta, &undo)
	if err != nil && !consumed {
		// Still paused: state and mem are untouched.
		err = errors.Join(err, undo.Run())
		b.proc, b.qmp = nil, nil
		return nil, fmt.Errorf("resume sandbox %s: %w", id, err)
	}
	// QEMU runs the guest (or may): from now on it is a running sandbox.
	b.paused = false
	b.undo = cleanup.Stack{}
	r.pushAll(ctx, id, b)
	b.handle = h
	r.flush.Add(filepath.Join(dir, "mem"))
	if err != nil {
		return h, fmt.Errorf("resume sandbox %s (running, but not healthy): %w", id, err)
	}
	r.log.InfoContext(ctx, "sandbox resumed", "sandbox", id, "addr", h.Addr, "pid", h.PID,
		"took", time.Since(start).Round(time.Millisecond))
	return h, nil
}

// resumeVM sets up the network and QEMU of paused sandbox id (undos onto
// undo), loads its state, removes the state file and continues the guest.
// consumed reports whether the state file is gone (the guest may run).
func (r *Runtime) resumeVM(ctx context.Context, id string, b *sandbox, meta *snapshot.Meta, undo *cleanup.Stack) (_ *runtime.Handle, consumed bool, _ error) {
	n, err := r.net.Setup(ctx, id, meta.AllowInternet)
	if err != nil {
		return nil, false, err
	}
	undo.Push(func() error { return r.net.Teardown(context.WithoutCancel(ctx), id) })
	m := r.sandboxMachine(id, meta)
	ids, err := r.sandboxIDs(r.sandboxDir(id))
	if err != nil {
		return nil, false, err
	}
	p, c, err := r.launcher.Launch(ctx, r.cgroupPath(id), n, m, ids, launch.Limits(meta.MemMiB, meta.VCPUs), undo)
	if err != nil {
		return nil, false, err
	}
	b.proc, b.qmp = p, c
	// The guest's NFS mounts reconnect once it runs: the server is first.
	if err := r.startVolumes(ctx, id, n, ids, nil, b, undo, false); err != nil {
		return nil, false, err
	}
	if err := qemu.Incoming(ctx, c, r.statePath(id)); err != nil {
		return nil, false, fmt.Errorf("load state: %w (qemu: %q)", err, qemu.TailFile(qemu.LogPath(r.sandboxDir(id)), 1024))
	}
	// Once the guest runs, mem no longer matches state: state goes first.
	if err := os.Remove(r.statePath(id)); err != nil {
		return nil, false, fmt.Errorf("consume state: %w", err)
	}
	h := &runtime.Handle{ID: id, Runtime: Name, Addr: n.SandboxAddr, PID: p.Pid}
	if err := memfile.SyncDir(r.sandboxDir(id)); err != nil {
		return h, true, err
	}
	restored := p.Con.Watch(guestinit.RestoredMarker)
	defer restored.Stop()
	if err := c.Execute(ctx, "cont", nil, nil); err != nil {
		return h, true, err
	}
	if err := qemu.SetLink(ctx, c, true); err != nil {
		return h, true, err
	}
	if err := guestenvd.WaitHealth(ctx, envdAddr(h), r.o.readyTimeout); err != nil {
		return h, true, fmt.Errorf("%w (console: %q)", err, p.Con.Tail(1024))
	}
	if err := restored.Wait(ctx, r.o.readyTimeout); err != nil {
		return h, true, err
	}
	return h, true, nil
}
