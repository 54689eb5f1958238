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
	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/jail"
	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/qmp"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/vm/guestinit"
	"github.com/moatsh/moat/internal/sparse"
)

// qemuOverheadMiB is what QEMU itself may use beyond guest RAM (the TCG
// translation cache is capped at 128 MiB by tb-size).
const qemuOverheadMiB = 320

// qemuPids bounds QEMU's threads (vCPUs, I/O workers); guest processes are
// limited inside the guest, not here.
const qemuPids = 256

// validID reports whether id can name this backend's host objects: up to 40 of [a-z0-9].
func validID(id string) error { return runtime.ValidateID(id, 40) }

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
// the snapshot's disk (see disk_linux.go); Spec.Pids is not enforced
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
		if fi, err := os.Stat(filepath.Join(spec.RootfsDir, "usr/local/bin/envd")); err != nil || fi.IsDir() {
			return nil, fmt.Errorf("sandbox %s: template rootfs %q has no /usr/local/bin/envd: %w", spec.ID, spec.RootfsDir, errdefs.ErrInvalidArgument)
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
	b.handle, b.created = h, true
	r.flush.add(filepath.Join(r.sandboxDir(id), "mem"))
	from := "template"
	if spec.Snapshot != "" {
		from = "snapshot " + spec.Snapshot
	}
	r.log.InfoContext(ctx, "sandbox created", "sandbox", id, "from", from, "addr", h.Addr, "pid", h.PID, "accel", snap.Accel,
		"took", time.Since(start).Round(time.Millisecond), "snapshot", snapped.Sub(start).Round(time.Millisecond),
		"copy", tm.copied.Sub(snapped).Round(time.Millisecond), "mem_data_mib", tm.memData>>20,
		"net", tm.netUp.Sub(tm.copied).Round(time.Millisecond), "launch", tm.launched.Sub(tm.netUp).Round(time.Millisecond),
		"load", tm.loaded.Sub(tm.launched).Round(time.Millisecond), "cont", tm.restored.Sub(tm.loaded).Round(time.Millisecond),
		"health", tm.health.Sub(tm.restored).Round(time.Millisecond), "marker", time.Since(tm.health).Round(time.Millisecond))
	return h, nil
}

// sourceSnapshot is what spec restores: its Snapshot, else its template's.
func (r *Runtime) sourceSnapshot(ctx context.Context, spec runtime.Spec) (*snapshot, error) {
	if spec.Snapshot != "" {
		return r.loadSnapshot(ctx, spec.Snapshot)
	}
	return r.ensureSnapshot(ctx, spec)
}

// restoreTimes are the milestones of a restore, for the log.
type restoreTimes struct {
	copied, netUp, launched, loaded, restored, health time.Time
	memData                                           int64 // bytes of memory file data copied
}

// restore gives sandbox spec.ID its files, network and QEMU, loads snap
// into it and waits for envd and the guest's restore marker. Undos go onto
// b.undo; b.mu is held.
func (r *Runtime) restore(ctx context.Context, spec runtime.Spec, snap *snapshot, b *sandbox) (*runtime.Handle, restoreTimes, error) {
	var tm restoreTimes
	id := spec.ID
	dir := r.sandboxDir(id)
	have, err := qcow2Size(snap.disk())
	if err != nil {
		return nil, tm, fmt.Errorf("sandbox %s: %w", id, err)
	}
	grow, err := diskTarget(spec, have)
	if err != nil {
		return nil, tm, fmt.Errorf("sandbox %s: %w", id, err)
	}
	meta, err := r.prepareDir(ctx, spec, snap, dir, b, &tm)
	if err != nil {
		return nil, tm, fmt.Errorf("sandbox %s: %w", id, err)
	}
	tm.copied = time.Now()
	n, err := r.net.Setup(ctx, id, spec.AllowInternet)
	if err != nil {
		return nil, tm, fmt.Errorf("sandbox %s: %w", id, err)
	}
	b.undo.Push(func() error { return r.net.Teardown(context.WithoutCancel(ctx), id) })
	tm.netUp = time.Now()
	m := r.sandboxMachine(id, meta)
	ids, err := r.sandboxIDs(dir)
	if err != nil {
		return nil, tm, fmt.Errorf("sandbox %s: %w", id, err)
	}
	p, c, err := r.launch(ctx, r.cgroupPath(id), n, m, ids, limitsFor(meta), &b.undo)
	if err != nil {
		return nil, tm, fmt.Errorf("sandbox %s: %w", id, err)
	}
	b.proc, b.qmp = p, c
	tm.launched = time.Now()
	restored := p.con.watch(guestinit.RestoredMarker)
	defer restored.stop()
	grown := p.con.watch(guestinit.GrownMarker)
	defer grown.stop()
	if err := incoming(ctx, c, snap.state()); err != nil {
		return nil, tm, fmt.Errorf("sandbox %s: restore: %w", id, err)
	}
	tm.loaded = time.Now()
	if err := c.Execute(ctx, "cont", nil, nil); err != nil {
		return nil, tm, fmt.Errorf("sandbox %s: restore: %w", id, err)
	}
	if grow > 0 {
		if err := growDisk(ctx, c, grow); err != nil {
			return nil, tm, fmt.Errorf("sandbox %s: %w", id, err)
		}
	}
	if err := setLink(ctx, c, true); err != nil {
		return nil, tm, fmt.Errorf("sandbox %s: %w", id, err)
	}
	tm.restored = time.Now()
	h := &runtime.Handle{ID: id, Runtime: Name, Addr: n.SandboxAddr, PID: p.pid}
	if err := waitHealth(ctx, envdAddr(h), r.o.readyTimeout); err != nil {
		return nil, tm, fmt.Errorf("sandbox %s: %w (console: %q)", id, err, p.con.tail(1024))
	}
	tm.health = time.Now()
	// Fresh CRNG and clock before anyone else talks to the guest.
	if err := restored.wait(ctx, r.o.readyTimeout); err != nil {
		return nil, tm, fmt.Errorf("sandbox %s: %w", id, err)
	}
	if grow > 0 {
		if err := grown.wait(ctx, r.o.readyTimeout); err != nil {
			return nil, tm, fmt.Errorf("sandbox %s: grow root file system to %d MiB: %w", id, grow>>20, err)
		}
	}
	return h, tm, nil
}

// prepareDir creates the sandbox directory with its own copy of snap's
// memory file, its disk (an overlay of the template's disk) and meta.json:
// a spare's files when there is one (see spare_linux.go), else copies.
func (r *Runtime) prepareDir(ctx context.Context, spec runtime.Spec, snap *snapshot, dir string, b *sandbox, tm *restoreTimes) (*vmMeta, error) {
	if _, err := os.Stat(dir); err == nil {
		return nil, fmt.Errorf("%s exists: %w", dir, errdefs.ErrAlreadyExists)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	b.undo.Push(func() error { return os.RemoveAll(dir) })
	if !r.spares.take(snap, dir) {
		if err := copySnapshotFiles(ctx, snap, dir, tm); err != nil {
			return nil, err
		}
	}
	meta := metaOf(snap)
	meta.Source, meta.AllowInternet = snap.Dir, spec.AllowInternet
	if err := writeMeta(dir, meta); err != nil {
		return nil, err
	}
	return meta, nil
}

// copySnapshotFiles gives dir its own copy of snap's memory file (whose
// writeback starts at once, so that a pause soon after does not wait for
// it) and its disk: an overlay of snap's, or for a Fork a copy.
func copySnapshotFiles(ctx context.Context, snap *snapshot, dir string, tm *restoreTimes) error {
	mem := filepath.Join(dir, "mem")
	n, err := sparse.Copy(snap.mem(), mem)
	if err != nil {
		return err
	}
	go startWriteback(mem)
	tm.memData = n
	disk := filepath.Join(dir, "disk.qcow2")
	if snap.Fork {
		// The snapshot's disk is an overlay of the template's disk: a copy
		// of it keeps that backing file, and the sandbox does not depend
		// on the snapshot once created (DeleteSnapshot may remove it).
		_, err = sparse.Copy(snap.disk(), disk)
		return err
	}
	return qcow2Overlay(ctx, snap.disk(), "qcow2", disk)
}

// sandboxMachine is the QEMU of sandbox id restoring into its own files.
func (r *Runtime) sandboxMachine(id string, meta *vmMeta) *machine {
	dir := r.sandboxDir(id)
	m := r.machineFor("moat-"+id, dir, meta.snapshotOf(dir))
	m.Disk, m.MemPath, m.MemShared, m.Incoming = filepath.Join(dir, "disk.qcow2"), filepath.Join(dir, "mem"), true, true
	return m
}

// limitsFor are the cgroup limits of a sandbox's QEMU.
func limitsFor(meta *vmMeta) *cgroups.Limits {
	return &cgroups.Limits{MemoryBytes: int64(meta.MemMiB+qemuOverheadMiB) << 20, Pids: qemuPids, CPUs: meta.VCPUs}
}

// machineFor is the QEMU layout shared by a snapshot and its restores.
func (r *Runtime) machineFor(name, dir string, snap *snapshot) *machine {
	return &machine{Name: name, Accel: snap.Accel, TSCkHz: r.tscKHz, VCPUs: snap.VCPUs, MemMiB: snap.MemMiB,
		Kernel: snap.Boot.Kernel, Initramfs: snap.Boot.Initramfs, MemPath: snap.mem(),
		QMP: filepath.Join(dir, "qmp.sock"), Console: filepath.Join(dir, "console.sock"), PidFile: filepath.Join(dir, "pid")}
}

// launch prepares the guest network in n's namespace, starts QEMU there,
// jailed as the root ID of ids (see jail_linux.go) unless WithoutJail (in
// cgroup cg with lim, when lim is set), and connects to its console and
// QMP sockets. Each acquisition pushes its undo onto undo.
func (r *Runtime) launch(ctx context.Context, cg string, n *netpolicy.Net, m *machine, ids idmap.Range, lim *cgroups.Limits, undo *cleanup.Stack) (*proc, *qmp.Client, error) {
	if len(m.QMP) >= 108 || len(m.Console) >= 108 {
		return nil, nil, fmt.Errorf("qmp socket path %s is too long for a unix socket (shorten the data dir): %w", m.QMP, errdefs.ErrInvalidArgument)
	}
	jc, err := r.prepareJail(n, m, ids)
	if err != nil {
		return nil, nil, err
	}
	owner := 0
	if jc != nil {
		owner = jc.UID
	}
	if err := setupGuestNet(n.NSPath, n.SandboxAddr, n.SandboxAddr6, owner, owner); err != nil {
		return nil, nil, err
	}
	if lim != nil {
		undo.Push(func() error { return cgroups.Remove(cg) })
		if err := cgroups.Create(cg, *lim); err != nil {
			return nil, nil, err
		}
	}
	dir := filepath.Dir(m.QMP)
	undo.Push(func() error { return unmountQEMULog(dir) })
	if err := mountQEMULog(dir); err != nil {
		return nil, nil, err
	}
	qemuLog := qemuLogPath(dir)
	p, err := start(r.o.qemu, n.NSPath, qemuLog, m, jc)
	if err != nil {
		return nil, nil, err
	}
	var c *qmp.Client
	undo.Push(func() error {
		err := p.stop(context.Background(), c)
		if c != nil {
			c.Close()
		}
		return err
	})
	// QEMU runs no guest code before its console is connected below, so
	// the guest never runs outside the cgroup.
	if lim != nil {
		if err := cgroups.AddPID(cg, p.pid); err != nil {
			return nil, nil, err
		}
	}
	// QEMU waits for the console connection before it opens QMP.
	if p.con, err = dialConsole(ctx, m.Console, consoleLog(m), p.alive); err != nil {
		return nil, nil, fmt.Errorf("%w (qemu: %q)", err, tail(qemuLog, 1024))
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err = dialQMPAt(dctx, m.QMP)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (qemu: %q)", err, tail(qemuLog, 1024))
	}
	return p, c, nil
}

// prepareJail removes what an earlier QEMU of m's directory left (its
// sockets and pidfile, which a QEMU of another user could not replace)
// and, unless WithoutJail, hands the directory to ids' root and returns
// the jail of m's QEMU; nil means no jail.
func (r *Runtime) prepareJail(n *netpolicy.Net, m *machine, ids idmap.Range) (*jail.Config, error) {
	for _, f := range []string{m.QMP, m.Console, m.PidFile} {
		_ = os.Remove(f)
	}
	if r.o.noJail {
		return nil, nil
	}
	if err := ownForQEMU(filepath.Dir(m.QMP), ids, m.MemPath, m.Disk); err != nil {
		return nil, err
	}
	return jailConfig(r.o.qemu, n.NSPath, m, ids)
}

// consoleLog is where m's console output is mirrored (capped, see console_linux.go).
func consoleLog(m *machine) string { return filepath.Join(filepath.Dir(m.Console), "console.log") }

// tail returns the last n bytes of a file, for error messages.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		_, _ = f.Seek(fi.Size()-n, 0)
	}
	b := make([]byte, n)
	k, _ := f.Read(b)
	return string(b[:k])
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
	if !b.created {
		r.pushAll(ctx, id, b)
	}
	r.flush.remove(filepath.Join(r.sandboxDir(id), "mem"))
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
	b.undo.Push(func() error { return unmountQEMULog(dir) })
	b.undo.Push(func() error { return r.net.Teardown(ctx, id) })
	b.undo.Push(func() error { return cgroups.Remove(r.cgroupPath(id)) })
	b.undo.Push(func() error {
		p := b.proc
		if p == nil {
			p = adoptProc(dir)
		}
		if p == nil {
			return nil
		}
		c := b.qmp
		if c == nil {
			dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			c, _ = dialQMPAt(dctx, filepath.Join(dir, "qmp.sock"))
			cancel()
		}
		err := p.stop(ctx, c)
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
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		c, err := dialQMPAt(dctx, filepath.Join(r.sandboxDir(id), "qmp.sock"))
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

// Alive implements runtime.Runtime: the QEMU process exists, or the
// sandbox is paused and its saved state exists.
func (r *Runtime) Alive(ctx context.Context, id string) bool {
	b, ok := r.boxes.Lookup(id)
	if !ok {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.paused {
		_, err := os.Stat(r.statePath(id))
		return b.created && err == nil
	}
	return b.created && b.proc != nil && b.proc.alive()
}
