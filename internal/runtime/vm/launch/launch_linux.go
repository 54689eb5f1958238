package launch

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
	"github.com/moatsh/moat/internal/runtime/vm/guestnet"
	"github.com/moatsh/moat/internal/runtime/vm/qemu"
)

// Every QEMU runs jailed (see internal/jail): as the root ID of a host ID
// range of its own (idmap, recorded in the sandbox directory as
// idmap, so that resume and Recover find it), without capabilities, with
// no_new_privs, in a mount namespace showing its own directory
// (read-write), the kernel, initramfs and the read-only backing files of
// its disk, /usr and /dev/{null,zero,random,urandom,net/tun} (and kvm).
//
// Ownership in a sandbox directory: the directory is root:<gid> 01770, so
// QEMU can create its sockets and pidfile but, the sticky bit set, cannot
// remove or replace root's files (meta.json, idmap, state, log/ (the
// tmpfs of qemu.log), console.log); mem and disk.qcow2 are root:<gid> 0660. A template
// snapshot directory is the same during its boot and root-owned, world-
// readable (disk.qcow2) or root-only (mem, state) afterwards (see
// package templatesnap).

// qemuOverheadMiB is what QEMU itself may use beyond guest RAM (the TCG
// translation cache is capped at 128 MiB by tb-size).
const qemuOverheadMiB = 320

// qemuPids bounds QEMU's threads (vCPUs, I/O workers); guest processes are
// limited inside the guest, not here.
const qemuPids = 256

// Limits are the cgroup limits of the QEMU of a guest with memMiB of RAM
// and vcpus vCPUs.
func Limits(memMiB, vcpus int) *cgroups.Limits {
	return &cgroups.Limits{MemoryBytes: int64(memMiB+qemuOverheadMiB) << 20, Pids: qemuPids, CPUs: vcpus}
}

// Launcher starts QEMU processes.
type Launcher struct {
	QEMU   string // qemu-system-x86_64
	NoJail bool   // run QEMU as root in the host's mount namespace (benchmarks, debugging)
}

// Launch prepares the guest network in n's namespace, starts QEMU there,
// jailed as the root ID of ids unless NoJail (in cgroup cg with lim, when
// lim is set), and connects to its console and QMP sockets. Each
// acquisition pushes its undo onto undo.
func (l *Launcher) Launch(ctx context.Context, cg string, n *netpolicy.Net, m *qemu.Machine, ids idmap.Range, lim *cgroups.Limits, undo *cleanup.Stack) (*qemu.Proc, *qmp.Client, error) {
	if len(m.QMP) >= 108 || len(m.Console) >= 108 {
		return nil, nil, fmt.Errorf("qmp socket path %s is too long for a unix socket (shorten the data dir): %w", m.QMP, errdefs.ErrInvalidArgument)
	}
	jc, err := l.PrepareJail(n, m, ids)
	if err != nil {
		return nil, nil, err
	}
	owner := 0
	if jc != nil {
		owner = jc.UID
	}
	if err := guestnet.Setup(n.NSPath, n.SandboxAddr, n.SandboxAddr6, owner, owner); err != nil {
		return nil, nil, err
	}
	if lim != nil {
		undo.Push(func() error { return cgroups.Remove(cg) })
		if err := cgroups.Create(cg, *lim); err != nil {
			return nil, nil, err
		}
	}
	dir := filepath.Dir(m.QMP)
	undo.Push(func() error { return qemu.UnmountLog(dir) })
	if err := qemu.MountLog(dir); err != nil {
		return nil, nil, err
	}
	qemuLog := qemu.LogPath(dir)
	p, err := qemu.Start(l.QEMU, n.NSPath, qemuLog, m, jc)
	if err != nil {
		return nil, nil, err
	}
	var c *qmp.Client
	undo.Push(func() error {
		err := p.Stop(context.Background(), c)
		if c != nil {
			c.Close()
		}
		return err
	})
	// QEMU runs no guest code before its console is connected below, so
	// the guest never runs outside the cgroup.
	if lim != nil {
		if err := cgroups.AddPID(cg, p.Pid); err != nil {
			return nil, nil, err
		}
	}
	// QEMU waits for the console connection before it opens QMP.
	if p.Con, err = qemu.DialConsole(ctx, m.Console, qemu.ConsoleLog(m), p.Alive); err != nil {
		return nil, nil, fmt.Errorf("%w (qemu: %q)", err, qemu.TailFile(qemuLog, 1024))
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err = qemu.DialQMP(dctx, m.QMP)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (qemu: %q)", err, qemu.TailFile(qemuLog, 1024))
	}
	return p, c, nil
}

// PrepareJail removes what an earlier QEMU of m's directory left (its
// sockets and pidfile, which a QEMU of another user could not replace)
// and, unless NoJail, hands the directory to ids' root and returns the
// jail of m's QEMU; nil means no jail.
func (l *Launcher) PrepareJail(n *netpolicy.Net, m *qemu.Machine, ids idmap.Range) (*jail.Config, error) {
	for _, f := range []string{m.QMP, m.Console, m.PidFile} {
		_ = os.Remove(f)
	}
	if l.NoJail {
		return nil, nil
	}
	if err := ownForQEMU(filepath.Dir(m.QMP), ids, m.MemPath, m.Disk); err != nil {
		return nil, err
	}
	return qemu.JailConfig(l.QEMU, n.NSPath, m, ids)
}

// ownForQEMU lets the jailed QEMU of dir, running as ids' root, use dir
// and write the files in rw that exist (see the comment above).
func ownForQEMU(dir string, ids idmap.Range, rw ...string) error {
	gid := ids.Root()
	if err := os.Chown(dir, 0, gid); err != nil {
		return fmt.Errorf("jail: %w", err)
	}
	if err := os.Chmod(dir, 0o770|os.ModeSticky); err != nil {
		return fmt.Errorf("jail: %w", err)
	}
	for _, f := range rw {
		err := os.Lchown(f, 0, gid)
		if errors.Is(err, os.ErrNotExist) { // QEMU creates it (a template boot's mem)
			continue
		}
		if err != nil {
			return fmt.Errorf("jail: %w", err)
		}
		if err := os.Chmod(f, 0o660); err != nil {
			return fmt.Errorf("jail: %w", err)
		}
	}
	return nil
}
