package vm

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/cgroups"
	"github.com/moatsh/moat/internal/cleanup"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/qmp"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/slots"
	"github.com/moatsh/moat/internal/runtime/vm/guestenvd"
	"github.com/moatsh/moat/internal/runtime/vm/kept"
	"github.com/moatsh/moat/internal/runtime/vm/launch"
	"github.com/moatsh/moat/internal/runtime/vm/memfile"
	"github.com/moatsh/moat/internal/runtime/vm/qemu"
	"github.com/moatsh/moat/internal/runtime/vm/templatesnap"
	"github.com/moatsh/moat/internal/runtime/vm/volserver"
)

// Name is the backend's registered name.
const Name = "vm"

var (
	_ runtime.Runtime     = (*Runtime)(nil)
	_ runtime.Snapshotter = (*Runtime)(nil)
)

func init() {
	runtime.Register(Name, func(ctx context.Context, cfg runtime.Config) (runtime.Runtime, error) {
		return New(ctx, cfg)
	})
}

// Settings are the vm backend's own settings (moat serve's flags; zero
// values are the defaults).
type Settings struct {
	Accel string // "auto" (KVM when a probe guest boots with it, else TCG), "kvm" or "tcg" ("" = auto)
	Init  string // the moat-vminit binary ("" = next to the running executable, else on PATH)
	NFSD  string // the moat-nfsd binary that serves volumes ("" = next to the running executable, else on PATH)
	// Prelaunch: QEMUs launched ahead per template build and size (0 =
	// DefaultPrelaunch, negative = none).
	Prelaunch int
	// KeepPaused: paused sandboxes that keep their stopped QEMU (0 =
	// DefaultKeepPaused, negative = none).
	KeepPaused int
}

// Validate refuses a setting the backend cannot use.
func (s Settings) Validate() error {
	switch s.Accel {
	case "", "auto", "kvm", "tcg":
		return nil
	}
	return fmt.Errorf("vm runtime: accelerator %q: want auto, kvm or tcg: %w", s.Accel, errdefs.ErrInvalidArgument)
}

// WithSettings applies the operator's settings; New fails on one that
// Validate refuses.
func WithSettings(s Settings) Option {
	return func(o *options) {
		if o.err = s.Validate(); o.err != nil {
			return
		}
		o.accel, o.init, o.nfsd = s.Accel, s.Init, s.NFSD
		o.prelaunch = runtime.Count(s.Prelaunch, DefaultPrelaunch)
		o.keepMax = runtime.Count(s.KeepPaused, DefaultKeepPaused)
	}
}

// Option configures a Runtime beyond runtime.Config.
type Option func(*options)

type options struct {
	err          error  // a bad setting (WithSettings)
	accel        string // "auto", "kvm" or "tcg"
	qemu         string
	kernel       string
	init         string
	cgroupParent string
	net          *netpolicy.Manager
	readyTimeout time.Duration
	bootTimeout  time.Duration
	diskFreeMiB  int
	noJail       bool
	spares       int
	prelaunch    int // slots per template build and size (slots_linux.go)
	keepMax      int // paused sandboxes that keep their QEMU (kept_linux.go)
	keepFor      time.Duration
	nfsd         string // moat-nfsd ("" = next to the running executable, else on PATH)
}

// WithAccel picks the accelerator: "auto" (KVM when a probe guest boots
// with it, else TCG), "kvm" or "tcg". Default: Settings.Accel or "auto".
func WithAccel(a string) Option { return func(o *options) { o.accel = a } }

// WithKernel sets the guest kernel (default: newest /boot/vmlinuz-*-cloud-amd64).
func WithKernel(path string) Option { return func(o *options) { o.kernel = path } }

// WithInit sets the moat-vminit binary packed into the initramfs.
func WithInit(path string) Option { return func(o *options) { o.init = path } }

// WithCgroupParent sets the cgroup under which QEMU processes live ("/moat").
func WithCgroupParent(p string) Option { return func(o *options) { o.cgroupParent = p } }

// WithNetwork uses m for sandbox networks instead of a default-scoped Manager.
func WithNetwork(m *netpolicy.Manager) Option { return func(o *options) { o.net = m } }

// WithReadyTimeout bounds how long a restore waits for envd.
func WithReadyTimeout(d time.Duration) Option { return func(o *options) { o.readyTimeout = d } }

// WithDiskFree sets the free space of a template's disk image (MiB), which
// is what a sandbox without Spec.DiskMiB gets; a sandbox's disk grows to
// its Spec.DiskMiB. Default 128.
func WithDiskFree(mib int) Option { return func(o *options) { o.diskFreeMiB = mib } }

// WithNFSD sets the moat-nfsd binary that serves sandboxes' volumes
// (default: Settings.NFSD, else next to the running executable,
// else on PATH).
func WithNFSD(path string) Option { return func(o *options) { o.nfsd = path } }

// WithoutJail runs QEMU as root with all capabilities in the host's mount
// namespace, as before the jail existed: for benchmarks and debugging only.
func WithoutJail() Option { return func(o *options) { o.noJail = true } }

// WithSpares sets how many sandboxes' files (memory copy, disk overlay)
// each template snapshot keeps made ahead of creates (see
// package memfile); 0 turns them off. Default 2.
func WithSpares(n int) Option { return func(o *options) { o.spares = n } }

// Runtime runs sandboxes as QEMU microVMs. Safe for concurrent use.
type Runtime struct {
	log      *slog.Logger
	dir      string // <DataDir>/vm
	o        options
	host     runtime.Host                                                   // the server's scope
	build    func(context.Context, runtime.Config) (runtime.Runtime, error) // cfg.BuildRuntime (build_linux.go)
	net      *netpolicy.Manager
	tscKHz   int
	ids      *idmap.Allocator  // each QEMU's host IDs, recorded in its sandbox dir
	launcher *launch.Launcher  // starts QEMU (jailed unless WithoutJail)
	tpl      *templatesnap.Set // boot files, accelerator, template snapshots

	boxes  runtime.Boxes[sandbox]
	bg     sync.WaitGroup // the paused sandboxes' background teardowns (Pause)
	spares *memfile.Spares
	flush  memfile.Flusher    // memory files of the sandboxes this process runs
	vols   *volserver.Spawner // the sandboxes' volume servers (volumes_linux.go)
	slots  *slots.Set         // QEMUs launched ahead (slots_linux.go)
	kept   *kept.Set          // paused sandboxes' stopped QEMUs (kept_linux.go)

	// testHookTeardown, when set, runs before each background teardown
	// (tests make it late).
	testHookTeardown func()
}

// sandbox is one VM's bookkeeping.
type sandbox struct {
	mu      sync.Mutex    // serialises Create/Kill/Pause/Resume of the same ID
	undo    cleanup.Stack // guarded by mu
	handle  *runtime.Handle
	proc    *qemu.Proc        // guarded by mu
	qmp     *qmp.Client       // guarded by mu; nil for adopted VMs until needed
	vols    *volserver.Server // guarded by mu; the volume server, nil without volumes
	created bool              // guarded by mu
	paused  bool              // guarded by mu; saved to <dir>/state, no QEMU, network or cgroup unless kept
	kept    bool              // guarded by mu; paused, its QEMU stopped but kept (kept_linux.go)
	// fsPaused: paused to its files only, no state or memory file
	// (fspause_linux.go); guarded by mu.
	fsPaused bool
	// pauseWritten is what the last Pause wrote (bytes; guarded by mu).
	pauseWritten int64
	// teardown releases what a Pause left to release after it returned
	// (network, cgroup, console log mount); nil when nothing
	// is pending. tornDown is closed once it ran. Both guarded by mu.
	teardown func() error
	tornDown chan struct{}
	// slot is set while the sandbox is a slot not yet created (guarded
	// by mu; slots_linux.go).
	slot *launched
}

// New checks the host and installs the network policy. The guest kernel,
// initramfs and template snapshots are prepared lazily by the first Create.
func New(ctx context.Context, cfg runtime.Config, opts ...Option) (*Runtime, error) {
	o := options{cgroupParent: cfg.Host.ScopeCgroup(), readyTimeout: 30 * time.Second,
		bootTimeout: 120 * time.Second, diskFreeMiB: 128, spares: memfile.DefaultSpares,
		prelaunch: DefaultPrelaunch, keepMax: DefaultKeepPaused, keepFor: defaultKeepFor}
	for _, f := range opts {
		f(&o)
	}
	if o.err != nil {
		return nil, o.err
	}
	if err := (Settings{Accel: o.accel}).Validate(); err != nil { // also WithAccel's
		return nil, err
	}
	if o.accel == "" {
		o.accel = "auto"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("runtime", Name)
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("vm runtime: empty data dir: %w", errdefs.ErrInvalidArgument)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("vm runtime: needs root (netns, tap, cgroups): %w", errdefs.ErrPermissionDenied)
	}
	var err error
	if o.qemu, err = exec.LookPath("qemu-system-x86_64"); err != nil {
		return nil, fmt.Errorf("vm runtime: qemu-system-x86_64 not found (apt-get install qemu-system-x86): %w", errdefs.ErrNotFound)
	}
	for _, tool := range []string{"qemu-img", "mkfs.ext4", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("vm runtime: %s not found (apt-get install qemu-utils e2fsprogs util-linux): %w", tool, errdefs.ErrNotFound)
		}
	}
	cgroups.TuneHost(ctx, log)
	r := &Runtime{log: log, dir: filepath.Join(cfg.DataDir, "vm"), o: o, host: cfg.Host, build: cfg.BuildRuntime, tscKHz: qemu.HostTSCkHz(),
		launcher: &launch.Launcher{QEMU: o.qemu, NoJail: o.noJail}}
	r.spares = memfile.NewSpares(log, r.dir, o.spares)
	r.slots = slots.New(log, o.prelaunch, slotKeys, slotDelay, r.Kill)
	r.kept = kept.New(o.keepMax, o.keepFor, r.releaseKept)
	r.vols = &volserver.Spawner{Src: o.nfsd, Log: log}
	// The container runtime allocates from the same ID space under
	// <DataDir>/sandboxes: its ranges count as taken (and both lock both
	// directories while allocating).
	r.ids = runtime.IDAllocator(cfg.DataDir, filepath.Join("vm", "sandboxes"), cfg.Host)
	for _, d := range []string{"kernel", "templates", "sandboxes", "snapshots"} {
		if err := os.MkdirAll(filepath.Join(r.dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("vm runtime: %w", err)
		}
	}
	r.net = o.net
	if r.net == nil {
		if r.net, err = runtime.Network(cfg, log); err != nil {
			return nil, fmt.Errorf("vm runtime: %w", err)
		}
	}
	r.tpl = templatesnap.New(r.templateConfig())
	return r, nil
}

// templateConfig is what r's template snapshots are taken with.
func (r *Runtime) templateConfig() templatesnap.Config {
	return templatesnap.Config{Dir: r.dir, Log: r.log, Net: r.net, IDs: r.ids, Launcher: r.launcher, TSCkHz: r.tscKHz,
		Kernel: r.o.kernel, Init: r.o.init, Accel: r.o.accel, CgroupParent: r.o.cgroupParent,
		DiskFreeMiB: r.o.diskFreeMiB, BootTimeout: r.o.bootTimeout}
}

// Parts are the pieces of a Runtime that package vmbench drives by hand,
// outside the sandbox bookkeeping.
type Parts struct {
	Templates    *templatesnap.Set // template snapshots (and their disk images)
	Launcher     *launch.Launcher  // starts QEMU (unjailed under WithoutJail)
	SandboxesDir string            // where sandbox directories go
	BootTimeout  time.Duration     // of a template's cold boot
	ReadyTimeout time.Duration     // of a restore (WithReadyTimeout)
}

// Parts returns r's Parts, for package vmbench only.
func (r *Runtime) Parts() Parts {
	return Parts{Templates: r.tpl, Launcher: r.launcher, SandboxesDir: filepath.Join(r.dir, "sandboxes"),
		BootTimeout: r.o.bootTimeout, ReadyTimeout: r.o.readyTimeout}
}

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return Name }

func (r *Runtime) sandboxDir(id string) string  { return filepath.Join(r.dir, "sandboxes", id) }
func (r *Runtime) cgroupPath(id string) string  { return r.o.cgroupParent + "/" + id }
func (r *Runtime) statePath(id string) string   { return filepath.Join(r.sandboxDir(id), "state") }
func (r *Runtime) snapshotDir(id string) string { return filepath.Join(r.dir, "snapshots", id) }

func envdAddr(h *runtime.Handle) string {
	return h.Addr.String() + ":" + strconv.Itoa(guestenvd.Port)
}

// LogFiles implements runtime.LogSource: the guest's console, its earlier
// part (rotated at qemu.ConsoleFileCap, and at each pause) first.
func (r *Runtime) LogFiles(id string) []string {
	dir := r.sandboxDir(id)
	return []string{filepath.Join(dir, "console.log.1"), filepath.Join(dir, "console.log")}
}
