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
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/vm/freeze"
	"github.com/moatsh/moat/internal/runtime/vm/launch"
	"github.com/moatsh/moat/internal/runtime/vm/qemu"
	"github.com/moatsh/moat/internal/runtime/vm/snapshot"
)

// The file protocol of a pause is package freeze's.

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
// to its memory file, then QEMU exits (unless it is kept, stopped, for a
// quick resume: kept_linux.go); the sandbox's network and cgroup go right
// after, in the background (see release); its directory stays. Once its
// QEMU is gone, the sandbox keeps no RAM or process until Resume. A pause that fails leaves the sandbox running. Errors:
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
	var pt freeze.Times
	pt.Start = time.Now()
	if err := freeze.Save(ctx, c, b.proc.Con, dir, r.o.readyTimeout, &pt); err != nil {
		_ = os.Remove(filepath.Join(dir, "state.tmp"))
		if terr := freeze.Thaw(ctx, c, b.proc.Con, r.o.readyTimeout, false); terr != nil {
			err = errors.Join(err, fmt.Errorf("continue after the failed pause: %w", terr))
		}
		return fmt.Errorf("pause sandbox %s: %w", id, err)
	}
	pt.Committed = time.Now()
	// The pause is complete: what fails from here on is left for Kill,
	// which removes everything by name.
	kept := r.keep(id, b) // kept_linux.go
	if pt.Quit = pt.Committed; !kept {
		r.releaseQuit(ctx, id, b, &pt)
	}
	b.paused = true
	b.pauseWritten = pt.Written
	b.handle = &runtime.Handle{ID: id, Runtime: Name, Paused: true}
	r.log.InfoContext(ctx, "sandbox paused", "sandbox", id, "took", time.Since(pt.Start).Round(time.Millisecond),
		"link_down", between(pt.Start, pt.LinkDown), "save", between(pt.LinkDown, pt.Saved), "sync", between(pt.Saved, pt.Synced),
		"commit", between(pt.Synced, pt.Committed), "quit", between(pt.Committed, pt.Quit), "kept", kept, "written_kib", pt.Written>>10)
	return nil
}

// release quits a paused sandbox's QEMU (noting when it was gone in pt) and
// its volume server, and leaves the removal of its network, cgroup and
// console log mount to b.teardown, which runs after Pause returned (its caller starts
// it) or first thing in the sandbox's next Resume or Kill, whichever comes
// first: about 50 ms of netlink and nftables work a pause need not wait
// for, since the sandbox's memory and processes are gone by then.
// Afterwards b.undo holds the by-name undos of Kill. b.mu is held.
func (r *Runtime) release(ctx context.Context, id string, b *sandbox, pt *freeze.Times) error {
	ctx = context.WithoutCancel(ctx)
	r.flush.Remove(filepath.Join(r.sandboxDir(id), "mem"))
	var err error
	if b.proc != nil {
		err = b.proc.Stop(ctx, b.qmp)
	}
	pt.Quit = time.Now()
	if b.qmp != nil {
		b.qmp.Close()
	}
	b.proc, b.qmp = nil, nil
	err = errors.Join(err, r.stopVolumes(id, b)) // the guest is saved: nothing calls it until the resume starts another
	b.teardown, b.tornDown = func() error {
		// Suspend, not Teardown: the policy the orchestrator sets before a
		// Resume (which may come before this ran) must survive it.
		errs := []error{r.net.Suspend(ctx, id), cgroups.Remove(r.cgroupPath(id)), qemu.UnmountLog(r.sandboxDir(id))}
		for _, f := range []string{"qmp.sock", "pid", "console.sock"} {
			_ = os.Remove(filepath.Join(r.sandboxDir(id), f))
		}
		return errors.Join(errs...)
	}, make(chan struct{})
	b.undo = cleanup.Stack{} // its undos were for the QEMU that just quit
	r.pushAll(ctx, id, b)
	return err
}

// releaseQuit releases a paused sandbox's QEMU now (release) and the rest
// in the background (finishTeardown, which waits for b.mu: after the
// caller's pause returned). b.mu is held.
func (r *Runtime) releaseQuit(ctx context.Context, id string, b *sandbox, pt *freeze.Times) {
	if err := r.release(ctx, id, b, pt); err != nil {
		r.log.WarnContext(ctx, "sandbox paused; cleanup incomplete", "sandbox", id, "err", err)
	}
	r.bg.Add(1)
	hook := r.testHookTeardown
	go func() {
		defer r.bg.Done()
		if hook != nil {
			hook()
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		r.finishTeardown(ctx, id, b)
	}()
}

// finishTeardown runs what release left to b.teardown, once; b.mu is held.
func (r *Runtime) finishTeardown(ctx context.Context, id string, b *sandbox) {
	if b.teardown == nil {
		return
	}
	start := time.Now()
	err := b.teardown()
	b.teardown = nil
	close(b.tornDown)
	if err != nil {
		r.log.WarnContext(ctx, "sandbox paused; cleanup incomplete", "sandbox", id, "err", err)
		return
	}
	r.log.DebugContext(ctx, "paused sandbox released", "sandbox", id, "took", time.Since(start).Round(time.Millisecond))
}

// Resume implements runtime.Runtime: a sandbox paused to its files boots
// from its disk (fspause_linux.go), a kept QEMU continues
// (kept_linux.go), else a new QEMU in a new network namespace (the address
// may change) loads the saved state over the sandbox's memory
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
	if b.fsPaused {
		return r.resumeFilesystem(ctx, id, b) // fspause_linux.go
	}
	if b.kept {
		if h, err := r.resumeKept(ctx, id, b); h != nil || err != nil {
			return h, err
		}
	}
	r.finishTeardown(ctx, id, b) // its network and cgroup names are about to be reused
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
	var tm launch.Times
	h, consumed, err := r.resumeVM(ctx, id, b, meta, &undo, &tm)
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
		"took", time.Since(start).Round(time.Millisecond), "net", between(start, tm.NetUp), tm.Phases())
	return h, nil
}

// resumeVM sets up the network and QEMU of paused sandbox id (undos onto
// undo), loads its state, removes the state file and continues the guest.
// consumed reports whether the state file is gone (the guest may run).
// Its milestones go to tm.
func (r *Runtime) resumeVM(ctx context.Context, id string, b *sandbox, meta *snapshot.Meta, undo *cleanup.Stack, tm *launch.Times) (_ *runtime.Handle, consumed bool, _ error) {
	n, err := r.net.Setup(ctx, id, meta.AllowInternet)
	if err != nil {
		return nil, false, err
	}
	undo.Push(func() error { return r.net.Teardown(context.WithoutCancel(ctx), id) })
	tm.NetUp = time.Now()
	m, err := launch.RestoreMachine(id, r.sandboxDir(id), meta, r.tscKHz)
	if err != nil {
		return nil, false, err
	}
	ids, err := launch.DirIDs(r.ids, r.sandboxDir(id))
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
	tm.Launched = time.Now()
	dir := r.sandboxDir(id)
	h := &runtime.Handle{ID: id, Runtime: Name, Addr: n.SandboxAddr, PID: p.Pid}
	x := launch.Restore{Proc: p, QMP: c, Dir: dir, State: r.statePath(id), Envd: envdAddr(h), Timeout: r.o.readyTimeout,
		Consume: func() (err error) { consumed, err = freeze.Consume(dir); return err }}
	err = x.Run(ctx, tm)
	return h, consumed, err
}
