package vm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/cgroups"
	"github.com/moatsh/moat/internal/cleanup"
	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/vm/guestinit"
)

// readyFile marks a complete snapshot directory.
const readyFile = "ready"

// bootFiles prepares the kernel and initramfs once per Runtime.
func (r *Runtime) bootFiles() (*bootFiles, error) {
	r.snapMu.Lock()
	defer r.snapMu.Unlock()
	if r.boot != nil {
		return r.boot, nil
	}
	bf, err := prepareBoot(r.dir, r.o.kernel, r.o.init)
	if err != nil {
		return nil, fmt.Errorf("guest kernel: %w", err)
	}
	r.boot = bf
	return bf, nil
}

// machineBase is what every guest of this Runtime boots or restores with:
// the kernel and initramfs, and the accelerator.
func (r *Runtime) machineBase(ctx context.Context) (*bootFiles, string, error) {
	bf, err := r.bootFiles()
	if err != nil {
		return nil, "", err
	}
	accel, err := r.resolveAccel(ctx, bf)
	if err != nil {
		return nil, "", err
	}
	return bf, accel, nil
}

// snapLock returns the mutex serialising work on one snapshot directory.
func (r *Runtime) snapLock(dir string) *sync.Mutex {
	r.snapMu.Lock()
	defer r.snapMu.Unlock()
	mu, ok := r.snapLocks[dir]
	if !ok {
		mu = &sync.Mutex{}
		r.snapLocks[dir] = mu
	}
	return mu
}

// ensureSnapshot returns the snapshot for spec's template build, memory size
// and vCPU count, booting the template once to take it if needed.
func (r *Runtime) ensureSnapshot(ctx context.Context, spec runtime.Spec) (*snapshot, error) {
	bf, accel, err := r.machineBase(ctx)
	if err != nil {
		return nil, err
	}
	key := templateKey(spec)
	tdir := filepath.Join(r.dir, "templates", key)
	// Everything a restore must match, the kernel command line included,
	// names the snapshot (short: the QMP socket path inside has to stay
	// under 108 bytes); meta spells it out.
	meta := fmt.Sprintf("memory %d MiB\nvcpus %d\naccel %s\nboot %s %s\ncmdline %s\nimage %s\n", spec.MemoryMiB, spec.VCPUs,
		accel, bf.Version, bf.Key, (&machine{TSCkHz: r.tscKHz}).kernelArgs(), imageName)
	if !r.o.coldSnapshot {
		meta += warmMetaLine + "\n"
	}
	sum := sha256.Sum256([]byte(meta))
	s := &snapshot{Boot: bf, Accel: accel, VCPUs: spec.VCPUs, MemMiB: spec.MemoryMiB, Template: key,
		Dir: filepath.Join(tdir, "snap-"+hex.EncodeToString(sum[:])[:12])}
	mu := r.snapLock(s.Dir)
	mu.Lock()
	defer mu.Unlock()
	// PruneTemplates keeps what was handed out recently: the caller is
	// about to put an overlay over it.
	defer touch(tdir, s.Dir)
	if _, err := os.Stat(filepath.Join(s.Dir, readyFile)); err == nil {
		return s, nil
	}
	img, err := ensureImage(ctx, tdir, spec.RootfsDir, r.o.diskFreeMiB)
	if err != nil {
		return nil, err
	}
	if err := r.takeSnapshot(context.WithoutCancel(ctx), img, s, meta); err != nil {
		_ = os.RemoveAll(s.Dir)
		return nil, fmt.Errorf("template %s: snapshot: %w", spec.TemplateID, err)
	}
	return s, nil
}

// touch sets the modification time of paths to now (best effort).
func touch(paths ...string) {
	now := time.Now()
	for _, p := range paths {
		_ = os.Chtimes(p, now, now)
	}
}

// takeSnapshot boots the template with RAM in a shared file, waits for envd
// and saves the device state; the guest's disk at that moment is kept as
// the snapshot's disk.qcow2, under which every sandbox gets its overlay.
func (r *Runtime) takeSnapshot(ctx context.Context, img string, s *snapshot, meta string) (retErr error) {
	_ = unmountQEMULog(s.Dir) // a boot a crash cut short
	_ = os.RemoveAll(s.Dir)
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.Dir, "meta"), []byte(meta), 0o644); err != nil {
		return err
	}
	if err := qcow2Overlay(ctx, img, "raw", s.disk()); err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(s.Dir))
	bootID := "tpl" + hex.EncodeToString(sum[:])[:12]
	var undo cleanup.Stack
	defer func() { retErr = errors.Join(retErr, undo.Run()) }()
	n, err := r.net.Setup(ctx, bootID, false)
	if err != nil {
		return err
	}
	undo.Push(func() error { return r.net.Teardown(ctx, bootID) })
	m := r.machineFor("moat-"+bootID, s.Dir, s)
	m.Disk, m.MemShared = s.disk(), true
	ids, err := r.bootIDs(bootID, &undo)
	if err != nil {
		return err
	}
	t0 := time.Now()
	lim := &cgroups.Limits{MemoryBytes: int64(s.MemMiB+qemuOverheadMiB) << 20, Pids: qemuPids, CPUs: s.VCPUs}
	p, c, err := r.launch(ctx, r.cgroupPath(bootID), n, m, ids, lim, &undo)
	if err != nil {
		return err
	}
	addr := n.SandboxAddr.String() + ":49983"
	if err := waitHealth(ctx, addr, r.o.bootTimeout); err != nil {
		return fmt.Errorf("cold boot: %w (console: %q)", err, p.con.tail(2048))
	}
	booted := time.Now()
	if !r.o.coldSnapshot {
		if err := warmGuest(ctx, addr); err != nil {
			r.log.DebugContext(ctx, "template warm-up", "dir", s.Dir, "err", err)
		}
	}
	t1 := time.Now()
	down := p.con.watch(guestinit.LinkDownMarker)
	defer down.stop()
	if err := setLink(ctx, c, false); err != nil {
		return err
	}
	if err := down.wait(ctx, 30*time.Second); err != nil {
		return err
	}
	if err := saveState(ctx, c, s.state()); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	t2 := time.Now()
	if err := undo.Run(); err != nil {
		return err
	}
	if err := disownTemplate(s.Dir); err != nil { // also removes the sockets and pidfile
		return err
	}
	if err := os.WriteFile(filepath.Join(s.Dir, readyFile), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return err
	}
	r.log.InfoContext(ctx, "template snapshot taken", "dir", s.Dir, "accel", s.Accel,
		"cold_boot", booted.Sub(t0).Round(time.Millisecond), "warm_up", t1.Sub(booted).Round(time.Millisecond),
		"save", t2.Sub(t1).Round(time.Millisecond))
	return nil
}

// bootIDs allocates the host IDs of a template boot's QEMU: a directory
// <vm>/sandboxes/<bootID> holds the record while the boot runs (undo
// removes it; Recover removes one a crash left, as an orphaned sandbox).
func (r *Runtime) bootIDs(bootID string, undo *cleanup.Stack) (idmap.Range, error) {
	dir := r.sandboxDir(bootID)
	_ = os.RemoveAll(dir)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return idmap.Range{}, fmt.Errorf("template boot ids: %w", err)
	}
	undo.Push(func() error { return os.RemoveAll(dir) })
	ids, err := r.ids.Allocate(dir)
	if err != nil {
		return idmap.Range{}, fmt.Errorf("template boot ids: %w", err)
	}
	return ids, nil
}

// resolveAccel decides the accelerator once: "auto" means KVM only when a
// probe guest boots with it.
func (r *Runtime) resolveAccel(ctx context.Context, bf *bootFiles) (string, error) {
	r.accelOnce.Do(func() {
		switch r.o.accel {
		case "kvm", "tcg":
			r.accel = r.o.accel
			r.log.InfoContext(ctx, "accelerator", "accel", r.accel, "why", "configured")
			return
		}
		f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
		if err != nil {
			r.accel = "tcg"
			r.log.InfoContext(ctx, "accelerator", "accel", "tcg", "why", "/dev/kvm unusable", "err", err)
			return
		}
		f.Close()
		if err := r.probeKVM(ctx, bf); err != nil {
			r.accel = "tcg"
			r.log.WarnContext(ctx, "accelerator", "accel", "tcg", "why", "a probe guest did not boot with KVM", "err", err)
			return
		}
		r.accel = "kvm"
		r.log.InfoContext(ctx, "accelerator", "accel", "kvm", "why", "probe guest booted")
	})
	return r.accel, r.accelErr
}

// probeKVM boots the guest kernel with KVM into the initramfs only, which
// prints guestinit.ProbeMarker and powers off.
func (r *Runtime) probeKVM(ctx context.Context, bf *bootFiles) error {
	dir, err := os.MkdirTemp(r.dir, ".probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	m := &machine{Accel: "kvm", TSCkHz: r.tscKHz}
	// The serial port and QEMU's messages share stdout, kept in a ring:
	// bounded whatever the guest prints.
	args := []string{"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-accel", "kvm", "-cpu", "host",
		"-m", "256", "-M", "microvm", "-serial", "stdio", "-kernel", bf.Kernel, "-initrd", bf.Initramfs,
		"-append", m.kernelArgs() + " " + guestinit.ArgProbe + "=1"}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.o.qemu, args...)
	out := newRing(consoleRing)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, out, out
	err = cmd.Run()
	if b := out.tail(consoleRing); strings.Contains(string(b), guestinit.ProbeMarker) {
		return nil
	}
	return fmt.Errorf("kvm probe: %v: %s", err, out.tail(2048))
}
