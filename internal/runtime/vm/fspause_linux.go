package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/moatsh/moat/internal/cleanup"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/fsmark"
	"github.com/moatsh/moat/internal/runtime/vm/freeze"
	"github.com/moatsh/moat/internal/runtime/vm/guestenvd"
	"github.com/moatsh/moat/internal/runtime/vm/launch"
	"github.com/moatsh/moat/internal/runtime/vm/memfile"
	"github.com/moatsh/moat/internal/runtime/vm/snapshot"
	"github.com/moatsh/moat/internal/runtime/vm/volserver"
)

// Filesystem-only pause (E2B's pause with memory: false): QEMU quits (QMP
// quit flushes and closes the disk), the sandbox's memory file is deleted
// and its disk overlay, meta.json and volumes stay. The orchestrator has
// the guest sync its file systems through envd first; what the guest had
// not written by then is lost, as on a power cut, and its ext4 journal is
// replayed at the next boot. A marker (package fsmark), written before
// QEMU quits, makes Recover adopt the sandbox as paused. Resume boots the
// guest's kernel cold from the kept disk with the machine of its meta.json
// (a fresh, sparse memory file, so a later full pause works as for any
// sandbox), mounts its volumes and waits for envd; the orchestrator then
// initialises envd with the sandbox's token and environment.

// PauseFilesystem implements runtime.FilesystemPauser.
func (r *Runtime) PauseFilesystem(ctx context.Context, id string) error {
	b, _, err := r.runningBox(id, "pause")
	if err != nil {
		return err
	}
	defer b.mu.Unlock()
	dir := r.sandboxDir(id)
	if err := fsmark.Write(dir); err != nil {
		return fmt.Errorf("pause sandbox %s: %w", id, err)
	}
	start := time.Now()
	r.releaseQuit(ctx, id, b, &freeze.Times{})
	// QEMU wrote its disk to the host's page cache (cache=unsafe): make it
	// durable, as a pause with memory does, so a host crash keeps it.
	if err := memfile.SyncFiles(filepath.Join(dir, "disk.qcow2")); err != nil {
		r.log.WarnContext(ctx, "sandbox paused to its files; its disk is not synced", "sandbox", id, "err", err)
	}
	if err := os.Remove(filepath.Join(dir, "mem")); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.log.WarnContext(ctx, "sandbox paused to its files; its memory file stays", "sandbox", id, "err", err)
	}
	b.paused, b.fsPaused = true, true
	b.handle = &runtime.Handle{ID: id, Runtime: Name, Paused: true}
	r.log.InfoContext(ctx, "sandbox paused to its files", "sandbox", id, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// resumeFilesystem boots filesystem-paused sandbox id from its disk. On
// error everything it started is undone and the sandbox stays paused (nil
// handle). b.mu is held.
func (r *Runtime) resumeFilesystem(ctx context.Context, id string, b *sandbox) (*runtime.Handle, error) {
	r.finishTeardown(ctx, id, b) // its network and cgroup names are about to be reused
	dir := r.sandboxDir(id)
	start := time.Now()
	var undo cleanup.Stack
	h, err := r.bootFromDisk(ctx, id, b, &undo)
	if err == nil {
		err = fsmark.Remove(dir)
	}
	if err != nil {
		err = errors.Join(err, undo.Run())
		b.proc, b.qmp = nil, nil
		return nil, fmt.Errorf("resume sandbox %s from its files: %w", id, err)
	}
	b.paused, b.fsPaused = false, false
	b.undo = cleanup.Stack{}
	r.pushAll(ctx, id, b)
	b.handle = h
	r.flush.Add(filepath.Join(dir, "mem"))
	r.log.InfoContext(ctx, "sandbox resumed from its files (cold boot)", "sandbox", id, "addr", h.Addr, "pid", h.PID,
		"took", time.Since(start).Round(time.Millisecond))
	return h, nil
}

// bootFromDisk starts sandbox id's QEMU on its kept disk with a new memory
// file, its volume server, and waits for envd; undos go onto undo.
func (r *Runtime) bootFromDisk(ctx context.Context, id string, b *sandbox, undo *cleanup.Stack) (*runtime.Handle, error) {
	dir := r.sandboxDir(id)
	meta, err := snapshot.ReadMeta(dir)
	if err != nil {
		return nil, err
	}
	vols, err := volserver.ReadVolumes(dir)
	if err != nil {
		return nil, err
	}
	n, err := r.net.Setup(ctx, id, meta.AllowInternet)
	if err != nil {
		return nil, err
	}
	undo.Push(func() error { return r.net.Teardown(context.WithoutCancel(ctx), id) })
	m := meta.Snapshot(dir).Machine("moat-"+id, dir, r.tscKHz)
	m.Disk, m.MemShared = filepath.Join(dir, "disk.qcow2"), true
	if err := newMemFile(m.MemPath, int64(meta.MemMiB)<<20); err != nil {
		return nil, err
	}
	ids, err := launch.DirIDs(r.ids, dir)
	if err != nil {
		return nil, err
	}
	p, c, err := r.launcher.Launch(ctx, r.cgroupPath(id), n, m, ids, launch.Limits(meta.MemMiB, meta.VCPUs), undo)
	if err != nil {
		return nil, err
	}
	b.proc, b.qmp = p, c
	if err := r.startVolumes(ctx, id, n, ids, nil, b, undo, false); err != nil {
		return nil, err
	}
	h := &runtime.Handle{ID: id, Runtime: Name, Addr: n.SandboxAddr, PID: p.Pid}
	if err := guestenvd.WaitHealth(ctx, envdAddr(h), r.o.bootTimeout); err != nil {
		return nil, fmt.Errorf("cold boot: %w (console: %q)", err, p.Con.Tail(2048))
	}
	if err := r.mountVolumes(ctx, h, vols); err != nil {
		return nil, err
	}
	return h, nil
}

// newMemFile makes path an empty sparse file of size bytes (the guest's
// RAM after a cold boot).
func newMemFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("memory file: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("memory file: %w", err)
	}
	return nil
}
