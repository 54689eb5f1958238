package templatesnap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/cleanup"
	"github.com/moatsh/moat/internal/guestinit"
	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/qmp"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/vm/guestenvd"
	"github.com/moatsh/moat/internal/runtime/vm/image"
	"github.com/moatsh/moat/internal/runtime/vm/launch"
	"github.com/moatsh/moat/internal/runtime/vm/qemu"
	"github.com/moatsh/moat/internal/runtime/vm/snapshot"
)

// Config is what a Set boots templates with; package vm fills it from its
// options.
type Config struct {
	Dir          string // <DataDir>/vm
	Log          *slog.Logger
	Net          *netpolicy.Manager // the template boots' networks
	IDs          *idmap.Allocator   // the template boots' QEMUs' host IDs
	Launcher     *launch.Launcher
	TSCkHz       int
	Kernel       string // guest kernel ("": newest /boot/vmlinuz-*-cloud-amd64)
	Init         string // moat-vminit ("": from $PATH)
	Accel        string // "auto", "kvm" or "tcg"
	CgroupParent string // of the template boots' QEMUs
	DiskFreeMiB  int    // free space of a template's disk image
	BootTimeout  time.Duration
	// ColdSnapshot: no warm-up commands before a snapshot (tests; may
	// change between Ensure calls).
	ColdSnapshot bool
}

// Set hands out the template snapshots of one vm runtime. Safe for
// concurrent use.
type Set struct {
	Config

	accelOnce sync.Once
	accel     string // resolved accelerator
	accelErr  error

	mu        sync.Mutex
	boot      *image.BootFiles       // guarded by mu
	snapLocks map[string]*sync.Mutex // snapshot dir → its lock; guarded by mu
}

// New returns a Set; the boot files and accelerator are prepared by the
// first call that needs them.
func New(cfg Config) *Set {
	return &Set{Config: cfg, snapLocks: map[string]*sync.Mutex{}}
}

// BootFiles prepares the kernel and initramfs once per Set.
func (t *Set) BootFiles() (*image.BootFiles, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.boot != nil {
		return t.boot, nil
	}
	bf, err := image.PrepareBoot(t.Dir, t.Kernel, t.Init)
	if err != nil {
		return nil, image.Misconfigured(fmt.Errorf("guest kernel: %w", err))
	}
	t.boot = bf
	return bf, nil
}

// MachineBase is what every guest of the runtime boots or restores with:
// the kernel and initramfs, and the accelerator.
func (t *Set) MachineBase(ctx context.Context) (*image.BootFiles, string, error) {
	bf, err := t.BootFiles()
	if err != nil {
		return nil, "", err
	}
	accel, err := t.resolveAccel(ctx, bf)
	if err != nil {
		return nil, "", err
	}
	return bf, accel, nil
}

// snapLock returns the mutex serialising work on one snapshot directory.
func (t *Set) snapLock(dir string) *sync.Mutex {
	t.mu.Lock()
	defer t.mu.Unlock()
	mu, ok := t.snapLocks[dir]
	if !ok {
		mu = &sync.Mutex{}
		t.snapLocks[dir] = mu
	}
	return mu
}

// Ensure returns the snapshot for spec's template build, memory size,
// vCPU count and disk size, booting the template once to take it if
// needed. The snapshot's disk already has Spec.DiskMiB (when that is more
// than the image), so that a create from it needs no online grow.
func (t *Set) Ensure(ctx context.Context, spec runtime.Spec) (*snapshot.Snapshot, error) {
	bf, accel, err := t.MachineBase(ctx)
	if err != nil {
		return nil, err
	}
	key := runtime.TemplateKey(spec)
	tdir := t.templateDir(key)
	// Everything a restore must match, the kernel command line included,
	// names the snapshot (short: the QMP socket path inside has to stay
	// under 108 bytes); meta spells it out.
	meta := fmt.Sprintf("memory %d MiB\nvcpus %d\naccel %s\nboot %s %s\ncmdline %s\nimage %s\n", spec.MemoryMiB, spec.VCPUs,
		accel, bf.Version, bf.Key, (&qemu.Machine{TSCkHz: t.TSCkHz, Accel: accel}).KernelArgs(), image.ImageName)
	if !t.ColdSnapshot {
		meta += warmMetaLine + "\n"
	}
	if spec.DiskMiB > 0 {
		meta += fmt.Sprintf("disk %d MiB\n", spec.DiskMiB)
	}
	sum := sha256.Sum256([]byte(meta))
	s := &snapshot.Snapshot{Boot: bf, Accel: accel, VCPUs: spec.VCPUs, MemMiB: spec.MemoryMiB, Template: key,
		Dir: filepath.Join(tdir, "snap-"+hex.EncodeToString(sum[:])[:12])}
	mu := t.snapLock(s.Dir)
	mu.Lock()
	defer mu.Unlock()
	// PruneTemplates keeps what was handed out recently: the caller is
	// about to put an overlay over it.
	defer touch(tdir, s.Dir)
	if _, err := os.Stat(filepath.Join(s.Dir, snapshot.ReadyFile)); err == nil {
		return s, nil
	}
	img, err := image.EnsureImage(ctx, tdir, spec.RootfsDir, t.DiskFreeMiB)
	if err != nil {
		return nil, err
	}
	err = t.takeSnapshot(context.WithoutCancel(ctx), img, s, meta, int64(spec.DiskMiB)<<20)
	if errors.Is(err, ErrBootHung) {
		t.Log.WarnContext(ctx, "template cold boot hung; booting it once more", "dir", s.Dir, "err", err)
		err = t.takeSnapshot(context.WithoutCancel(ctx), img, s, meta, int64(spec.DiskMiB)<<20)
	}
	if err != nil {
		_ = os.RemoveAll(s.Dir)
		return nil, fmt.Errorf("template %s: snapshot: %w", spec.TemplateID, err)
	}
	return s, nil
}

// templateDir is where spec's template build keeps its image and snapshots.
func (t *Set) templateDir(key string) string { return filepath.Join(t.Dir, "templates", key) }

// Image returns the disk image of spec's template build (built from its
// rootfs if needed), under its snapshots' disks.
func (t *Set) Image(ctx context.Context, spec runtime.Spec) (string, error) {
	return image.EnsureImage(ctx, t.templateDir(runtime.TemplateKey(spec)), spec.RootfsDir, t.DiskFreeMiB)
}

// touch sets the modification time of paths to now (best effort).
func touch(paths ...string) {
	now := time.Now()
	for _, p := range paths {
		_ = os.Chtimes(p, now, now)
	}
}

// ErrBootHung: a cold boot's envd did not answer within the boot timeout.
// Seen once in CI (2026-12-03, a TCG guest with 2 vCPUs whose console
// stopped 0.47 s into the kernel's boot; cause unknown): Ensure and the
// start benchmark boot once more.
var ErrBootHung = errors.New("cold boot hung")

// takeSnapshot boots the template with RAM in a shared file, waits for envd,
// grows its disk to disk bytes (when more than the image) and saves the
// device state; the guest's disk at that moment is kept as the snapshot's
// disk.qcow2, under which every sandbox gets its overlay.
func (t *Set) takeSnapshot(ctx context.Context, img string, s *snapshot.Snapshot, meta string, disk int64) (retErr error) {
	_ = qemu.UnmountLog(s.Dir) // a boot a crash cut short
	_ = os.RemoveAll(s.Dir)
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.Dir, "meta"), []byte(meta), 0o644); err != nil {
		return err
	}
	if err := image.Qcow2Overlay(ctx, img, "raw", s.Disk()); err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(s.Dir))
	bootID := "tpl" + hex.EncodeToString(sum[:])[:12]
	var undo cleanup.Stack
	defer func() { retErr = errors.Join(retErr, undo.Run()) }()
	n, err := t.Net.Setup(ctx, bootID, false)
	if err != nil {
		return err
	}
	undo.Push(func() error { return t.Net.Teardown(ctx, bootID) })
	m := s.Machine("moat-"+bootID, s.Dir, t.TSCkHz)
	m.Disk, m.MemShared = s.Disk(), true
	ids, err := t.bootIDs(bootID, &undo)
	if err != nil {
		return err
	}
	t0 := time.Now()
	p, c, err := t.Launcher.Launch(ctx, t.CgroupParent+"/"+bootID, n, m, ids, launch.Limits(s.MemMiB, s.VCPUs), &undo)
	if err != nil {
		return err
	}
	addr := n.SandboxAddr.String() + ":49983"
	if err := guestenvd.WaitHealth(ctx, addr, t.BootTimeout); err != nil {
		return fmt.Errorf("cold boot: %w: %w (console: %q)", ErrBootHung, err, p.Con.Tail(2048))
	}
	if err := growDisk(ctx, c, p.Con, s.Disk(), disk); err != nil {
		return fmt.Errorf("cold boot: %w (console: %q)", err, p.Con.Tail(2048))
	}
	booted := time.Now()
	if !t.ColdSnapshot {
		if err := warmGuest(ctx, addr); err != nil {
			t.Log.DebugContext(ctx, "template warm-up", "dir", s.Dir, "err", err)
		}
		if err := warmInterpreter(ctx, addr); err != nil {
			t.Log.WarnContext(ctx, "template warm-up: no python context before the snapshot", "dir", s.Dir, "err", err)
		}
	}
	t1 := time.Now()
	down := p.Con.Watch(guestinit.LinkDownMarker)
	defer down.Stop()
	if err := qemu.SetLink(ctx, c, false); err != nil {
		return err
	}
	if err := down.Wait(ctx, 30*time.Second); err != nil {
		return err
	}
	if err := qemu.SaveState(ctx, c, s.State()); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	t2 := time.Now()
	if err := undo.Run(); err != nil {
		return err
	}
	if err := disownTemplate(s.Dir); err != nil { // also removes the sockets and pidfile
		return err
	}
	if err := os.WriteFile(filepath.Join(s.Dir, snapshot.ReadyFile), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return err
	}
	t.Log.InfoContext(ctx, "template snapshot taken", "dir", s.Dir, "accel", s.Accel,
		"cold_boot", booted.Sub(t0).Round(time.Millisecond), "warm_up", t1.Sub(booted).Round(time.Millisecond),
		"save", t2.Sub(t1).Round(time.Millisecond))
	return nil
}

// bootIDs allocates the host IDs of a template boot's QEMU: a directory
// <vm>/sandboxes/<bootID> holds the record while the boot runs (undo
// removes it; Recover removes one a crash left, as an orphaned sandbox).
func (t *Set) bootIDs(bootID string, undo *cleanup.Stack) (idmap.Range, error) {
	dir := filepath.Join(t.Dir, "sandboxes", bootID)
	_ = os.RemoveAll(dir)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return idmap.Range{}, fmt.Errorf("template boot ids: %w", err)
	}
	undo.Push(func() error { return os.RemoveAll(dir) })
	ids, err := t.IDs.Allocate(dir)
	if err != nil {
		return idmap.Range{}, fmt.Errorf("template boot ids: %w", err)
	}
	return ids, nil
}

// growDisk grows the booted template's disk (the qcow2 file path) to size
// bytes when that is more than it has, and waits until the guest grew its
// root file system (see image/disk_linux.go): every restore of the
// snapshot then starts with that size.
func growDisk(ctx context.Context, c *qmp.Client, con *qemu.Console, path string, size int64) error {
	have, err := image.Qcow2Size(path)
	if err != nil || size <= have {
		return err
	}
	grown := con.Watch(guestinit.GrownMarker)
	defer grown.Stop()
	if err := qemu.GrowDisk(ctx, c, size); err != nil {
		return err
	}
	if err := grown.Wait(ctx, 30*time.Second); err != nil {
		return fmt.Errorf("grow root file system to %d MiB: %w", size>>20, err)
	}
	return nil
}
