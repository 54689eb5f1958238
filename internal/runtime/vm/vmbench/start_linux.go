package vmbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/moatsh/moat/internal/cleanup"
	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/qmp"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/vm"
	"github.com/moatsh/moat/internal/runtime/vm/guestenvd"
	"github.com/moatsh/moat/internal/runtime/vm/image"
	"github.com/moatsh/moat/internal/runtime/vm/qemu"
	"github.com/moatsh/moat/internal/runtime/vm/snapshot"
	"github.com/moatsh/moat/internal/runtime/vm/templatesnap"
	"github.com/moatsh/moat/internal/sparse"
)

// StartBench says what MeasureStart measures: the floors under a microVM
// create→first command, outside any server.
type StartBench struct {
	DataDir    string // the vm runtime's data dir (its template snapshot is reused, or taken)
	TemplateID string
	RootfsDir  string // the template's root filesystem
	N          int    // rounds of each kind
	Logger     *slog.Logger
	VM         vm.Settings // the vm backend's settings of `moat serve` (guest init, accelerator)
}

// StartFloors are MeasureStart's samples.
type StartFloors struct {
	// ColdBoot: QEMU start of the template's disk (no snapshot) → envd
	// healthy → `bash -l -c true` as user ended.
	ColdBoot []time.Duration
	// RawRestore: QEMU started by hand with -incoming defer (no jail, no
	// cgroup; memory file copied and disk overlay made before) → state
	// loaded → cont → envd healthy.
	RawRestore []time.Duration
	// Phases of RawRestore: QEMU start → QMP connected, migrate-incoming
	// → loaded, cont + link up, → envd healthy.
	Launch, Load, Cont, Health []time.Duration
	// In the restored guests: envd Process/Start of /bin/true (no shell),
	// twice, then of /bin/bash -l -c true twice, as user.
	True, TrueSecond, BashFirst, BashSecond []time.Duration
	// HealthAgain: one more envd /health round trip once the commands ran
	// (the HTTP floor under every command).
	HealthAgain []time.Duration
}

// MeasureStart boots the template cold and restores its snapshot by hand,
// b.N times each (alternating), in a network scope of its own, so a
// running server's objects are never touched.
func MeasureStart(ctx context.Context, b StartBench) (*StartFloors, error) {
	if b.Logger == nil {
		b.Logger = slog.New(slog.DiscardHandler)
	}
	m, err := netpolicy.New(b.Logger, netpolicy.WithScope("moatbs", "ms", netip.MustParsePrefix("10.235.0.0/16")))
	if err != nil {
		return nil, fmt.Errorf("start bench: %w", err)
	}
	defer m.Close()
	rt, err := vm.New(ctx, runtime.Config{DataDir: b.DataDir, Logger: b.Logger}, vm.WithSettings(b.VM), vm.WithNetwork(m), vm.WithoutJail(), vm.WithSpares(0), vm.WithPrelaunch(0))
	if err != nil {
		return nil, fmt.Errorf("start bench: %w", err)
	}
	r := &starter{Parts: rt.Parts(), net: m}
	spec := runtime.Spec{ID: benchID(), TemplateID: b.TemplateID, RootfsDir: b.RootfsDir, VCPUs: 2, MemoryMiB: 512}
	snap, err := r.Templates.Ensure(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("start bench: %w", err)
	}
	img, err := r.Templates.Image(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("start bench: %w", err)
	}
	f := &StartFloors{}
	for i := 0; i < b.N; i++ {
		if err := r.benchRestore(ctx, snap, f); err != nil {
			return f, fmt.Errorf("start bench: raw restore: %w", err)
		}
		d, err := r.benchColdBoot(ctx, snap, img)
		if errors.Is(err, templatesnap.ErrBootHung) && ctx.Err() == nil {
			slog.WarnContext(ctx, "start bench: cold boot hung; booting once more", "err", err)
			d, err = r.benchColdBoot(ctx, snap, img)
		}
		if err != nil {
			return f, fmt.Errorf("start bench: cold boot: %w", err)
		}
		f.ColdBoot = append(f.ColdBoot, d)
	}
	return f, nil
}

func benchID() string {
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	return "bs" + hex.EncodeToString(id)
}

// starter boots and restores the benchmark's guests by hand, with the
// parts of an unjailed vm.Runtime, in the network scope net.
type starter struct {
	vm.Parts
	net *netpolicy.Manager
}

// benchVM is one QEMU of the start benchmark, in its own directory and
// network namespace; undo releases everything.
type benchVM struct {
	id, addr string
	c        *qmp.Client
	undo     cleanup.Stack
}

// benchDir makes the VM's directory and network; the caller runs g.undo.
func (r *starter) benchDir(ctx context.Context) (*benchVM, string, error) {
	g := &benchVM{id: benchID()}
	dir := filepath.Join(r.SandboxesDir, g.id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return g, "", err
	}
	g.undo.Push(func() error { return os.RemoveAll(dir) })
	return g, dir, nil
}

// benchLaunch sets up g's network and starts m in it, unjailed.
func (r *starter) benchLaunch(ctx context.Context, g *benchVM, m *qemu.Machine) (*qemu.Proc, error) {
	n, err := r.net.Setup(ctx, g.id, false)
	if err != nil {
		return nil, err
	}
	g.undo.Push(func() error { return r.net.Teardown(context.WithoutCancel(ctx), g.id) })
	g.addr = n.SandboxAddr.String() + ":" + strconv.Itoa(guestenvd.Port)
	// No jail (no ID range) and no cgroup: QEMU as launch runs it otherwise.
	p, c, err := r.Launcher.Launch(ctx, "", n, m, idmap.Range{}, nil, &g.undo)
	if err != nil {
		return nil, err
	}
	g.c = c
	return p, nil
}

// benchColdBoot boots the template's disk image without a snapshot and
// runs the first command.
func (r *starter) benchColdBoot(ctx context.Context, snap *snapshot.Snapshot, img string) (_ time.Duration, retErr error) {
	g, dir, err := r.benchDir(ctx)
	defer func() { retErr = errors.Join(retErr, g.undo.Run()) }()
	if err != nil {
		return 0, err
	}
	disk := filepath.Join(dir, "disk.qcow2")
	if err := image.Qcow2Overlay(ctx, img, "raw", disk); err != nil {
		return 0, err
	}
	m := snap.Machine("moat-"+g.id, dir, r.Templates.TSCkHz)
	m.Disk, m.MemPath, m.MemShared = disk, filepath.Join(dir, "mem"), true
	t0 := time.Now()
	p, err := r.benchLaunch(ctx, g, m)
	if err != nil {
		return 0, err
	}
	if err := guestenvd.WaitHealth(ctx, g.addr, r.BootTimeout); err != nil {
		return 0, fmt.Errorf("%w: %w (console: %q)", templatesnap.ErrBootHung, err, p.Con.Tail(2048))
	}
	if err := benchRun(ctx, g.addr, "/bin/bash", "-l", "-c", "true"); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// benchRestore restores snap into a QEMU started by hand, then times
// the floor commands in the restored guest.
func (r *starter) benchRestore(ctx context.Context, snap *snapshot.Snapshot, f *StartFloors) (retErr error) {
	g, dir, err := r.benchDir(ctx)
	defer func() { retErr = errors.Join(retErr, g.undo.Run()) }()
	if err != nil {
		return err
	}
	if _, err := sparse.Copy(snap.Mem(), filepath.Join(dir, "mem")); err != nil {
		return err
	}
	if err := image.Qcow2Overlay(ctx, snap.Disk(), "qcow2", filepath.Join(dir, "disk.qcow2")); err != nil {
		return err
	}
	m := snapshot.MetaOf(snap).Snapshot(dir).Machine("moat-"+g.id, dir, r.Templates.TSCkHz)
	m.Disk, m.MemPath, m.MemShared, m.Incoming = filepath.Join(dir, "disk.qcow2"), filepath.Join(dir, "mem"), true, true
	t0 := time.Now()
	p, err := r.benchLaunch(ctx, g, m)
	if err != nil {
		return err
	}
	t1 := time.Now()
	if err := qemu.Incoming(ctx, g.c, snap.State()); err != nil {
		return err
	}
	t2 := time.Now()
	if err := g.c.Execute(ctx, "cont", nil, nil); err != nil {
		return err
	}
	if err := qemu.SetLink(ctx, g.c, true); err != nil {
		return err
	}
	t3 := time.Now()
	if err := guestenvd.WaitRestored(ctx, g.addr, r.ReadyTimeout); err != nil {
		return fmt.Errorf("%w (console: %q)", err, p.Con.Tail(1024))
	}
	t4 := time.Now()
	f.RawRestore = append(f.RawRestore, t4.Sub(t0))
	f.Launch, f.Load = append(f.Launch, t1.Sub(t0)), append(f.Load, t2.Sub(t1))
	f.Cont, f.Health = append(f.Cont, t3.Sub(t2)), append(f.Health, t4.Sub(t3))
	for _, c := range []struct {
		out  *[]time.Duration
		argv []string
	}{{&f.True, []string{"/bin/true"}}, {&f.TrueSecond, []string{"/bin/true"}}, {&f.BashFirst, []string{"/bin/bash", "-l", "-c", "true"}},
		{&f.BashSecond, []string{"/bin/bash", "-l", "-c", "true"}}} {
		s := time.Now()
		if err := benchRun(ctx, g.addr, c.argv...); err != nil {
			return err
		}
		*c.out = append(*c.out, time.Since(s))
	}
	s := time.Now()
	if err := guestenvd.WaitHealth(ctx, g.addr, r.ReadyTimeout); err != nil {
		return err
	}
	f.HealthAgain = append(f.HealthAgain, time.Since(s))
	return nil
}

// benchRun runs argv as user through envd's process API at addr.
func benchRun(ctx context.Context, addr string, argv ...string) error {
	if err := guestenvd.Run(ctx, addr, "user", argv); err != nil {
		return fmt.Errorf("%v: %w", argv, err)
	}
	return nil
}
