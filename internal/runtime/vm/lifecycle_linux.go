package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/moatsh/moat/internal/cgroups"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/qmp"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/vm/image"
	"github.com/moatsh/moat/internal/runtime/vm/launch"
	"github.com/moatsh/moat/internal/runtime/vm/qemu"
	"github.com/moatsh/moat/internal/runtime/vm/snapshot"
	"github.com/moatsh/moat/internal/sandboxid"
)

// validID reports whether id can name this backend's host objects: up to 40 of [a-z0-9].
func validID(id string) error { return sandboxid.Validate(id, 40) }

func withDefaults(spec runtime.Spec) runtime.Spec {
	if spec.VCPUs <= 0 {
		spec.VCPUs = 1
	}
	if spec.MemoryMiB <= 0 {
		spec.MemoryMiB = 512
	}
	return spec
}

// Create implements runtime.Runtime: it restores the template's snapshot
// (taking it first if there is none for this template build, memory size and
// vCPU count), or the snapshot Spec.Snapshot taken by Runtime.Snapshot, into
// a new QEMU whose RAM is the sandbox's own sparse copy of the snapshot's
// memory file, with a qcow2 overlay of the template's disk, then waits for
// envd. The disk is grown online to Spec.DiskMiB when that is larger than
// the snapshot's disk (see image/disk_linux.go); Spec.Pids is not enforced
// (processes are limited by guest memory). A sandbox from a snapshot gets
// the snapshot's vCPUs and memory size. Errors: ErrAlreadyExists (id in
// use), ErrNotFound (no such snapshot), ErrInvalidArgument (Spec.DiskMiB
// below the snapshot's disk size), ErrFailedPrecondition (snapshot taken
// with another kernel or accelerator).
func (r *Runtime) Create(ctx context.Context, spec runtime.Spec) (_ *runtime.Handle, retErr error) {
	if err := validID(spec.ID); err != nil {
		return nil, err
	}
	if spec.Snapshot == "" {
		if err := runtime.CheckRootfs(spec); err != nil {
			return nil, err
		}
	}
	spec = withDefaults(spec)
	id := spec.ID
	b := r.boxes.Get(id)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.created {
		return nil, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrAlreadyExists)
	}
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, b.undo.Run())
			b.proc, b.qmp = nil, nil
			r.boxes.Forget(id, b)
		}
	}()
	start := time.Now()
	snap, err := r.sourceSnapshot(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	snapped := time.Now()
	h, tm, err := r.restore(ctx, spec, snap, b)
	if err != nil {
		return nil, err
	}
	if err := r.mountVolumes(ctx, h, spec.Volumes); err != nil { // volumes_linux.go
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	b.handle, b.created = h, true
	r.flush.Add(filepath.Join(r.sandboxDir(id), "mem"))
	from := "template"
	if spec.Snapshot != "" {
		from = "snapshot " + spec.Snapshot
	}
	r.log.InfoContext(ctx, "sandbox created", "sandbox", id, "from", from, "addr", h.Addr, "pid", h.PID, "accel", snap.Accel,
		"took", time.Since(start).Round(time.Millisecond), "snapshot", snapped.Sub(start).Round(time.Millisecond),
		"copy", tm.Copied.Sub(snapped).Round(time.Millisecond), "mem_data_mib", tm.MemData>>20,
		"net", between(tm.Copied, tm.NetUp), "slot", tm.Slot, tm.Phases())
	r.refillSlots(spec, snap)
	return h, nil
}

// between is b−a rounded to milliseconds, for the logs.
func between(a, b time.Time) time.Duration { return b.Sub(a).Round(time.Millisecond) }

// sourceSnapshot is what spec restores: its Snapshot, else its template's.
func (r *Runtime) sourceSnapshot(ctx context.Context, spec runtime.Spec) (*snapshot.Snapshot, error) {
	if spec.Snapshot != "" {
		return r.loadSnapshot(ctx, spec.Snapshot)
	}
	return r.tpl.Ensure(ctx, spec)
}

// restore gives sandbox spec.ID its files, network and QEMU (or takes
// those of its slot, see slots_linux.go), loads snap into it and waits for
// envd and the guest's restore marker. Undos go onto b.undo; b.mu is held.
func (r *Runtime) restore(ctx context.Context, spec runtime.Spec, snap *snapshot.Snapshot, b *sandbox) (*runtime.Handle, launch.Times, error) {
	id := spec.ID
	have, err := image.Qcow2Size(snap.Disk())
	if err != nil {
		return nil, launch.Times{}, fmt.Errorf("sandbox %s: %w", id, err)
	}
	grow, err := image.DiskTarget(spec, have)
	if err != nil {
		return nil, launch.Times{}, fmt.Errorf("sandbox %s: %w", id, err)
	}
	l, err := r.takeSlot(spec, snap, b)
	if err != nil {
		return nil, launch.Times{}, fmt.Errorf("sandbox %s: %w", id, err)
	}
	if l == nil {
		if l, err = r.launch(ctx, spec, snap, b); err != nil {
			return nil, launch.Times{}, fmt.Errorf("sandbox %s: %w", id, err)
		}
	}
	tm, p, c := l.tm, b.proc, b.qmp
	if err := r.startVolumes(ctx, id, l.Net, l.IDs, spec.Volumes, b, &b.undo, false); err != nil {
		return nil, tm, fmt.Errorf("sandbox %s: %w", id, err)
	}
	tm.Launched = time.Now()
	h := &runtime.Handle{ID: id, Runtime: Name, Addr: l.Net.SandboxAddr, PID: p.Pid}
	x := launch.Restore{Proc: p, QMP: c, Dir: r.sandboxDir(id), State: snap.State(), GrowTo: grow, Envd: envdAddr(h), Timeout: r.o.readyTimeout}
	if err := x.Run(ctx, &tm); err != nil {
		return nil, tm, fmt.Errorf("sandbox %s: %w", id, err)
	}
	return h, tm, nil
}

// launched is a sandbox brought up to its QEMU waiting for the snapshot:
// the first half of a restore, or a slot made ahead (slots_linux.go).
type launched struct {
	*launch.Sandbox
	tm launch.Times
}

// launch gives sandbox spec.ID its directory (files of snap), network and
// QEMU (see launch.Launcher.Sandbox), connected to its console and QMP in
// b.proc and b.qmp. Undos go onto b.undo; b.mu is held.
func (r *Runtime) launch(ctx context.Context, spec runtime.Spec, snap *snapshot.Snapshot, b *sandbox) (*launched, error) {
	env := launch.Env{Net: r.net, Spares: r.spares, IDs: r.ids, TSCkHz: r.tscKHz}
	s, err := r.launcher.Sandbox(ctx, env, spec, snap, r.sandboxDir(spec.ID), r.cgroupPath(spec.ID), &b.undo)
	if err != nil {
		return nil, err
	}
	b.proc, b.qmp = s.Proc, s.QMP
	return &launched{Sandbox: s, tm: launch.Times{Copied: s.Copied, NetUp: s.NetUp, MemData: s.MemData}}, nil
}

// Kill implements runtime.Runtime: QMP quit, then SIGKILL; network, cgroup
// and files go too. Idempotent; works by name for sandboxes this process did
// not create.
func (r *Runtime) Kill(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	b := r.boxes.Get(id)
	b.mu.Lock()
	defer b.mu.Unlock()
	r.finishTeardown(ctx, id, b)
	r.slots.Forget(id)
	r.kept.Take(id)
	b.kept = false // its undos are a running sandbox's
	if !b.created && b.slot == nil {
		r.pushAll(ctx, id, b)
	}
	b.slot = nil
	r.flush.Remove(filepath.Join(r.sandboxDir(id), "mem"))
	err := b.undo.Run()
	b.created, b.paused, b.proc, b.qmp = false, false, nil, nil
	r.boxes.Forget(id, b)
	if err != nil {
		return fmt.Errorf("kill sandbox %s: %w", id, err)
	}
	r.log.InfoContext(ctx, "sandbox killed", "sandbox", id)
	return nil
}

// pushAll stacks every by-name undo of id, in Create's order.
func (r *Runtime) pushAll(ctx context.Context, id string, b *sandbox) {
	ctx = context.WithoutCancel(ctx)
	dir := r.sandboxDir(id)
	b.undo.Push(func() error { return os.RemoveAll(dir) })
	b.undo.Push(func() error { return qemu.UnmountLog(dir) })
	b.undo.Push(func() error { return r.net.Teardown(ctx, id) })
	b.undo.Push(func() error { return cgroups.Remove(r.cgroupPath(id)) })
	b.undo.Push(func() error { return r.stopVolumes(id, b) })
	b.undo.Push(func() error {
		p := b.proc
		if p == nil {
			p = qemu.Adopt(dir)
		}
		if p == nil {
			return nil
		}
		c := b.qmp
		if c == nil {
			c, _ = qemu.DialQMPIn(ctx, dir, 500*time.Millisecond)
		}
		err := p.Stop(ctx, c)
		if c != nil {
			c.Close()
		}
		return err
	})
}

// client returns the sandbox's QMP connection, dialling it for adopted
// VMs; b.mu is held.
func (r *Runtime) client(ctx context.Context, id string, b *sandbox) (*qmp.Client, error) {
	if b.qmp == nil {
		c, err := qemu.DialQMPIn(ctx, r.sandboxDir(id), 2*time.Second)
		if err != nil {
			return nil, fmt.Errorf("sandbox %s: %w", id, err)
		}
		b.qmp = c
	}
	return b.qmp, nil
}

// Stats implements runtime.Runtime from the QEMU process's cgroup; a
// sandbox paused to disk uses nothing (zero Stats). DiskUsed and DiskTotal
// stay 0: the host cannot see inside the guest's file system, so callers
// ask envd (its /metrics reports the guest's statfs of /, which is the
// disk grown to Spec.DiskMiB).
func (r *Runtime) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	if err := validID(id); err != nil {
		return runtime.Stats{}, err
	}
	if b, ok := r.boxes.Lookup(id); ok {
		b.mu.Lock()
		paused := b.paused
		b.mu.Unlock()
		if paused {
			return runtime.Stats{Time: time.Now()}, nil
		}
	}
	st, err := cgroups.ReadStats(r.cgroupPath(id))
	if err != nil {
		return st, fmt.Errorf("stats of sandbox %s: %w", id, err)
	}
	return st, nil
}

// Wait implements runtime.Runtime: QEMU's process wait for a VM this
// process started (exit code and signal known), a pidfd for one adopted
// after a restart. A sandbox paused to disk has no QEMU: not found.
func (r *Runtime) Wait(ctx context.Context, id string) (runtime.ExitStatus, error) {
	var p *qemu.Proc
	if b, ok := r.boxes.Lookup(id); ok {
		b.mu.Lock()
		if b.created && !b.paused {
			p = b.proc
		}
		b.mu.Unlock()
	}
	if p == nil {
		return runtime.ExitStatus{}, fmt.Errorf("wait for sandbox %s: no qemu: %w", id, errdefs.ErrNotFound)
	}
	st, err := p.WaitCtx(ctx)
	if err == nil {
		st.OOMKilled = cgroups.OOMKills(r.cgroupPath(id)) > 0
	}
	return st, err
}

// Foreground implements runtime.Foregrounder: the QEMU of a handed-out
// warm-pool member gets the normal CPU weight back.
func (r *Runtime) Foreground(_ context.Context, id string) error {
	return cgroups.SetBackground(r.cgroupPath(id), false)
}
