package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/moatsh/moat/internal/cleanup"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/qmp"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/vm/image"
	"github.com/moatsh/moat/internal/runtime/vm/memfile"
	"github.com/moatsh/moat/internal/runtime/vm/qemu"
	"github.com/moatsh/moat/internal/runtime/vm/snapshot"
	"github.com/moatsh/moat/internal/sparse"
)

// Env is what a sandbox's launch takes from its runtime.
type Env struct {
	Net    *netpolicy.Manager
	Spares *memfile.Spares // may hold the sandbox's files, made ahead
	IDs    *idmap.Allocator
	TSCkHz int
}

// Sandbox is a sandbox brought up to its QEMU waiting for a snapshot
// (-incoming defer): the first half of a restore.
type Sandbox struct {
	SnapDir       string // the snapshot it is for
	Meta          *snapshot.Meta
	Net           *netpolicy.Net
	IDs           idmap.Range
	Proc          *qemu.Proc
	QMP           *qmp.Client
	Copied, NetUp time.Time // when its files, then its network, were ready
	MemData       int64     // bytes of memory file data copied (0: a spare's)
}

// Sandbox gives sandbox spec.ID directory dir with its files of snap (see
// Files), its network (egress as spec.AllowInternet until a policy is set)
// and its QEMU in cgroup cg, connected to its console and QMP. Each
// acquisition pushes its undo onto undo.
func (l *Launcher) Sandbox(ctx context.Context, env Env, spec runtime.Spec, snap *snapshot.Snapshot, dir, cg string, undo *cleanup.Stack) (*Sandbox, error) {
	s := &Sandbox{SnapDir: snap.Dir}
	id := spec.ID
	var err error
	if s.Meta, s.MemData, err = Files(ctx, env.Spares, snap, dir, spec.AllowInternet, undo); err != nil {
		return nil, err
	}
	s.Copied = time.Now()
	if s.Net, err = env.Net.Setup(ctx, id, spec.AllowInternet); err != nil {
		return nil, err
	}
	undo.Push(func() error { return env.Net.Teardown(context.WithoutCancel(ctx), id) })
	s.NetUp = time.Now()
	m, err := RestoreMachine(id, dir, s.Meta, env.TSCkHz)
	if err != nil {
		return nil, err
	}
	if s.IDs, err = DirIDs(env.IDs, dir); err != nil {
		return nil, err
	}
	lim := Limits(s.Meta.MemMiB, s.Meta.VCPUs)
	lim.Background = spec.Background
	if s.Proc, s.QMP, err = l.Launch(ctx, cg, s.Net, m, s.IDs, lim, undo); err != nil {
		return nil, err
	}
	return s, nil
}

// Files creates sandbox directory dir (its removal onto undo) with its
// own copy of snap's memory file, its disk (an overlay of the template's)
// and meta.json: a spare's files when there is one, else copies. It
// returns the meta and the bytes of memory data copied.
func Files(ctx context.Context, spares *memfile.Spares, snap *snapshot.Snapshot, dir string, allowInternet bool, undo *cleanup.Stack) (*snapshot.Meta, int64, error) {
	if _, err := os.Stat(dir); err == nil {
		return nil, 0, fmt.Errorf("%s exists: %w", dir, errdefs.ErrAlreadyExists)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, 0, err
	}
	undo.Push(func() error { return os.RemoveAll(dir) })
	var n int64
	if !spares.Take(memfile.Source{Dir: snap.Dir, Fork: snap.Fork}, dir) {
		var err error
		if n, err = copySnapshotFiles(ctx, snap, dir); err != nil {
			return nil, 0, err
		}
	}
	meta := snapshot.MetaOf(snap)
	meta.Source, meta.AllowInternet = snap.Dir, allowInternet
	if err := snapshot.WriteMeta(dir, meta); err != nil {
		return nil, 0, err
	}
	return meta, n, nil
}

// copySnapshotFiles gives dir its own copy of snap's memory file (whose
// writeback starts at once, so that a pause soon after does not wait for
// it) and its disk: an overlay of snap's, or for a Fork a copy.
func copySnapshotFiles(ctx context.Context, snap *snapshot.Snapshot, dir string) (int64, error) {
	mem := filepath.Join(dir, "mem")
	n, err := sparse.Copy(snap.Mem(), mem)
	if err != nil {
		return 0, err
	}
	go memfile.StartWriteback(mem)
	disk := filepath.Join(dir, "disk.qcow2")
	if snap.Fork {
		// The snapshot's disk is an overlay of the template's disk: a copy
		// of it keeps that backing file, and the sandbox does not depend
		// on the snapshot once created (DeleteSnapshot may remove it).
		_, err = sparse.Copy(snap.Disk(), disk)
		return n, err
	}
	return n, image.Qcow2Overlay(ctx, snap.Disk(), "qcow2", disk)
}

// RestoreMachine is the QEMU of sandbox id restoring into its own files
// in dir, with the stubs of the kernel and initramfs (see
// qemu.RestoreStubs).
func RestoreMachine(id, dir string, meta *snapshot.Meta, tscKHz int) (*qemu.Machine, error) {
	m := meta.Snapshot(dir).Machine("moat-"+id, dir, tscKHz)
	m.Disk, m.MemPath, m.MemShared, m.Incoming = filepath.Join(dir, "disk.qcow2"), filepath.Join(dir, "mem"), true, true
	var err error
	m.Kernel, m.Initramfs, err = qemu.RestoreStubs(m.Kernel, m.Initramfs)
	return m, err
}

// DirIDs returns the host ID range recorded in sandbox directory dir (its
// QEMU runs as that range's root, and resume and Recover find it there),
// allocating one for a directory without (made by an older version).
func DirIDs(ids *idmap.Allocator, dir string) (idmap.Range, error) {
	r, err := idmap.Read(dir)
	if err == nil {
		return r, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return idmap.Range{}, err
	}
	return ids.Allocate(dir)
}
