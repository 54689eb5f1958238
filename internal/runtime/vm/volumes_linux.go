package vm

import (
	"context"
	"fmt"

	"github.com/moatsh/moat/internal/cleanup"
	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/vm/guestenvd"
	"github.com/moatsh/moat/internal/runtime/vm/volserver"
)

// Volumes of a microVM sandbox: a jailed NFS server of its own (package
// volserver) serves them on the guest's gateway address, and the guest
// mounts them over NFSv3 after the restore. Nothing is added to the
// machine, so snapshots, pauses and resumes work as without volumes.

// MountsVolumes implements runtime.VolumeMounter.
func (r *Runtime) MountsVolumes() bool { return true }

// startVolumes starts sandbox id's volume server for vs (nil: the
// volumes recorded in its directory, for a resume or a recovery, whose
// server is adopted when adopt is set), its stop onto undo when undo is
// set; b.mu is held and QEMU runs (its tap, the server's address, exists).
func (r *Runtime) startVolumes(ctx context.Context, id string, n *netpolicy.Net, ids idmap.Range, vs []runtime.VolumeMount,
	b *sandbox, undo *cleanup.Stack, adopt bool) error {
	if vs != nil && len(vs) == 0 {
		return nil
	}
	sb := volserver.Sandbox{ID: id, Dir: r.sandboxDir(id), NetNS: n.NSPath, Cgroup: r.cgroupPath(id), Host: ids.Host}
	s, err := r.vols.Run(ctx, sb, vs, adopt)
	if err != nil || s == nil {
		return err
	}
	b.vols = s
	if undo != nil {
		undo.Push(func() error { return r.stopVolumes(id, b) })
	}
	return nil
}

// stopVolumes stops sandbox id's volume server, whoever started it;
// b.mu is held.
func (r *Runtime) stopVolumes(id string, b *sandbox) error {
	if s := b.vols; s != nil {
		b.vols = nil
		return s.Stop()
	}
	return volserver.StopByName(r.sandboxDir(id), id)
}

// mountVolumes mounts vs in the guest at h, as root through envd (the
// guest init's mount-volumes: the template needs no NFS tools).
func (r *Runtime) mountVolumes(ctx context.Context, h *runtime.Handle, vs []runtime.VolumeMount) error {
	if len(vs) == 0 {
		return nil
	}
	if err := guestenvd.Run(ctx, envdAddr(h), "root", volserver.GuestMountArgv(vs)); err != nil {
		return fmt.Errorf("mount volumes in the guest: %w", err)
	}
	return nil
}
