package container

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/cgroups"
	"github.com/moatsh/moat/internal/cleanup"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/hostfs"
	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/container/oci"
	"github.com/moatsh/moat/internal/runtime/slots"
	"github.com/moatsh/moat/internal/sandboxid"
)

// Name is the backend's registered name.
const Name = "container"

var _ runtime.Runtime = (*Runtime)(nil)

func init() {
	runtime.Register(Name, func(ctx context.Context, cfg runtime.Config) (runtime.Runtime, error) {
		return New(ctx, cfg)
	})
}

// Option configures a Runtime beyond runtime.Config.
type Option func(*options)

type options struct {
	err          error  // a bad setting (WithSettings)
	ociName      string // "", "runc" or "crun"
	stateRoot    string
	cgroupParent string
	net          *netpolicy.Manager
	readyTimeout time.Duration
	flavor       flavor // crun/runc, or runsc for the gvisor backend (flavor_linux.go)
	prelaunch    int    // slots per template build and size (slots_linux.go)
}

// Settings are the container backend's own settings (moat serve's flags;
// zero values are the defaults).
type Settings struct {
	// OCIRuntime is "runc" or "crun" ("" = crun if it works, else runc).
	OCIRuntime string
	// Prelaunch is how many containers are created ahead (not started)
	// per template build and size (0 = DefaultPrelaunch, negative = none).
	Prelaunch int
}

// Validate refuses a setting the backend cannot use.
func (s Settings) Validate() error {
	switch s.OCIRuntime {
	case "", "runc", "crun":
		return nil
	}
	return fmt.Errorf("container runtime: OCI runtime %q: want runc or crun: %w", s.OCIRuntime, errdefs.ErrInvalidArgument)
}

// WithSettings applies the operator's settings; New fails on one that
// Validate refuses.
func WithSettings(s Settings) Option {
	return func(o *options) {
		if o.err = s.Validate(); o.err == nil {
			WithOCIRuntime(s.OCIRuntime)(o)
			o.prelaunch = runtime.Count(s.Prelaunch, DefaultPrelaunch)
		}
	}
}

// WithOCIRuntime forces "runc" or "crun", like Settings.OCIRuntime; ""
// keeps the configured choice or the probe's.
func WithOCIRuntime(name string) Option {
	return func(o *options) {
		if name != "" {
			o.ociName = name
		}
	}
}

// WithStateRoot sets the OCI runtime's --root directory.
func WithStateRoot(dir string) Option { return func(o *options) { o.stateRoot = dir } }

// WithCgroupParent sets the cgroup under which sandboxes live ("/moat").
func WithCgroupParent(p string) Option { return func(o *options) { o.cgroupParent = p } }

// WithNetwork uses m for sandbox networks instead of a default-scoped Manager.
func WithNetwork(m *netpolicy.Manager) Option { return func(o *options) { o.net = m } }

// WithReadyTimeout bounds how long Create waits for envd to accept connections.
func WithReadyTimeout(d time.Duration) Option { return func(o *options) { o.readyTimeout = d } }

// Runtime runs sandboxes as OCI containers. Safe for concurrent use.
type Runtime struct {
	log     *slog.Logger
	dataDir string
	o       options
	oci     *oci.CLI
	others  []*oci.CLI // the other OCI runtime in its default root, for Recover only
	net     *netpolicy.Manager
	ownNet  bool             // net is not the server's shared one (cfg.Network): Close releases it
	ids     *idmap.Allocator // each sandbox's host ID range, recorded in its dir
	disks   *hostfs.Disks    // blank disk images in <DataDir>/disks
	slots   *slots.Set       // sandboxes made ahead (slots_linux.go)

	boxes runtime.Boxes[sandbox]
}

// sandbox is one container's bookkeeping.
type sandbox struct {
	mu      sync.Mutex    // serialises Create/Kill of the same ID
	undo    cleanup.Stack // guarded by mu
	handle  *runtime.Handle
	proc    *runtime.Process // the container's init, watched by Wait; guarded by mu
	created bool             // guarded by mu
	slot    *slot            // guarded by mu; set while it is an idle or reserved slot (slots_linux.go)
	// fsPaused: paused to its filesystem, no container (fspause_linux.go); guarded by mu.
	fsPaused bool
}

// New probes the host, picks the OCI runtime and installs the network policy.
func New(ctx context.Context, cfg runtime.Config, opts ...Option) (*Runtime, error) {
	o := options{cgroupParent: cfg.Host.ScopeCgroup(), readyTimeout: 10 * time.Second, flavor: containerFlavor,
		prelaunch: DefaultPrelaunch}
	for _, f := range opts {
		f(&o)
	}
	if o.err != nil {
		return nil, o.err
	}
	if o.flavor.gvisor != nil {
		o.prelaunch = 0
	}
	if cfg.Host.Scope != 0 && o.stateRoot == "" {
		o.stateRoot = filepath.Join(cfg.Host.ScopeStateDir(), o.flavor.name)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("runtime", o.flavor.name)
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("container runtime: empty data dir: %w", errdefs.ErrInvalidArgument)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("container runtime: needs root (namespaces, cgroups, mounts): %w", errdefs.ErrPermissionDenied)
	}
	if err := traversable(filepath.Join(cfg.DataDir, o.flavor.subdir)); err != nil {
		return nil, fmt.Errorf("container runtime: %w", err)
	}
	cgroups.TuneHost(ctx, log)
	// The vm runtime allocates from the same ID space under
	// <DataDir>/vm/sandboxes: its ranges count as taken (and both lock
	// both directories while allocating).
	r := &Runtime{log: log, dataDir: cfg.DataDir, o: o, ids: o.flavor.allocator(cfg.DataDir, cfg.Host), disks: hostfs.NewDisks(cfg.DataDir)}
	probeRoot := o.stateRoot
	if probeRoot == "" {
		probeRoot = "/run/moat"
	}
	oc, err := o.flavor.pick(ctx, log, o.ociName, probeRoot)
	if err != nil {
		return nil, fmt.Errorf("container runtime: %w", err)
	}
	if o.stateRoot == "" {
		oc.Root = filepath.Join("/run/moat", oc.Name)
		r.others = o.flavor.others(oc)
	}
	if err := oc.EnableLean(filepath.Join(cfg.DataDir, o.flavor.subdir)); err != nil { // oci/lean_linux.go
		log.WarnContext(ctx, "containers are created in a copy of the host's mount namespace, every sandbox's mounts included", "err", err)
	}
	r.oci = oc
	r.net = o.net
	r.ownNet = o.net != nil || cfg.Network == nil
	r.slots = slots.New(log, o.prelaunch, slotKeys, slotDelay, r.Kill)
	if r.net == nil {
		if r.net, err = runtime.Network(cfg, log); err != nil {
			return nil, fmt.Errorf("container runtime: %w", err)
		}
	}
	return r, nil
}

// traversable creates dir and makes sure that every account may traverse it
// and its parents (o+x, not read): the sandboxes' roots are unprivileged host
// IDs that must reach their own directories. dir and its parent get o+x;
// an ancestor without it is an error, not changed.
func traversable(dir string) error {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	for i, p := 0, dir; ; i, p = i+1, filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if i > 1 {
				return fmt.Errorf("%s is not searchable by other users (chmod o+x), which sandboxes in user namespaces need to reach %s: %w",
					p, dir, errdefs.ErrFailedPrecondition)
			}
			if err := os.Chmod(p, fi.Mode().Perm()|0o001); err != nil {
				return err
			}
		}
		if p == "/" || p == "." {
			return nil
		}
	}
}

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return r.o.flavor.name }

// SandboxDir is where sandbox id's host objects live
// (<DataDir>/sandboxes/<id>, <DataDir>/gvisor/sandboxes/<id>): its ID
// range (idmap), its log and, in disk/upper, its writable layer, which
// the host can read (runsc writes through its gofer, --overlay2=none).
// Template builds take a build sandbox's changes from there.
func (r *Runtime) SandboxDir(id string) string {
	return filepath.Join(r.dataDir, r.o.flavor.subdir, id)
}

// OCIRuntime is the OCI binary in use: "runc" or "crun".
func (r *Runtime) OCIRuntime() string { return r.oci.Name }

func (r *Runtime) containerName(id string) string { return "moat-" + id }
func (r *Runtime) dir(id string) string           { return filepath.Join(r.dataDir, r.o.flavor.subdir, id) }
func (r *Runtime) cgroupsPath(id string) string   { return r.o.cgroupParent + "/" + id }
func (r *Runtime) logPath(id string) string       { return filepath.Join(r.dir(id), "log", hostfs.LogName) }

// Create implements runtime.Runtime: overlay, network, bundle, `run -d`
// (or only `start` of the sandbox's slot, made ahead: slots_linux.go), then
// it waits until envd accepts TCP connections. On error everything is undone.
func (r *Runtime) Create(ctx context.Context, spec runtime.Spec) (_ *runtime.Handle, retErr error) {
	if err := validID(spec.ID); err != nil {
		return nil, err
	}
	if spec.Snapshot != "" {
		return nil, fmt.Errorf("sandbox %s: starting from a snapshot needs the vm runtime: %w", spec.ID, errdefs.ErrNotImplemented)
	}
	if err := runtime.CheckRootfs(spec); err != nil {
		return nil, err
	}
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
			r.boxes.Forget(id, b)
		}
	}()
	start := time.Now()
	tr := newTrace()
	n, slot, err := r.startSlot(ctx, spec, b, tr) // slots_linux.go
	if err != nil {
		return nil, err
	}
	if n == nil {
		if n, err = r.launch(ctx, spec, b, tr, false); err != nil {
			return nil, err
		}
	}
	started := time.Now()
	h := &runtime.Handle{ID: id, Runtime: r.Name(), Addr: n.SandboxAddr, PID: b.proc.PID()}
	if err := r.waitReady(ctx, h, b.proc, 0); err != nil { // a new sandbox's log is new
		return nil, err
	}
	tr.step("envd_listen")
	b.handle, b.created = h, true
	r.log.InfoContext(ctx, "sandbox created", "sandbox", id, "addr", h.Addr, "pid", h.PID,
		"oci", r.oci.Name, "took", time.Since(start).Round(time.Microsecond), "slot", slot,
		"run", started.Sub(start).Round(time.Microsecond), "ready", time.Since(started).Round(time.Microsecond))
	r.log.DebugContext(ctx, "sandbox create steps", append([]any{"sandbox", id}, tr.attrs...)...)
	return h, nil
}

// launch prepares sandbox spec.ID's bundle (prepare) and runs its
// container: detached with envd started, or, with createOnly (a slot),
// created with its init waiting for `start` before it runs envd. b.proc is
// the container's init. Undos go onto b.undo; b.mu is held.
func (r *Runtime) launch(ctx context.Context, spec runtime.Spec, b *sandbox, tr *trace, createOnly bool) (*netpolicy.Net, error) {
	id := spec.ID
	n, err := r.prepare(ctx, spec, &b.undo, tr)
	if err != nil {
		return nil, err
	}
	b.undo.Push(func() error { return r.deleteContainer(context.WithoutCancel(ctx), id) })
	run := r.oci.Start
	if createOnly {
		run = r.oci.Create
	}
	err = r.runBundle(ctx, id, b, run)
	if b.proc != nil {
		b.undo.Push(func() error { b.closeProc(); return nil })
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	tr.step("oci_run")
	return n, nil
}

// runBundle runs (or, with the OCI runtime's Create, creates) the container
// of id's bundle with its output on envd's log, and opens its init as
// b.proc. b.mu is held.
func (r *Runtime) runBundle(ctx context.Context, id string, b *sandbox,
	run func(ctx context.Context, bundle, name, pidFile string, log *os.File) error) error {
	logf, err := os.OpenFile(r.logPath(id), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	pidFile := filepath.Join(r.dir(id), "pid")
	if err := run(ctx, r.dir(id), r.containerName(id), pidFile, logf); err != nil {
		tail, _ := hostfs.Tail(logf.Name(), 1024)
		return fmt.Errorf("%w: %s", err, tail)
	}
	pid, err := readPID(pidFile)
	if err != nil {
		return err
	}
	// The init was started a moment ago: pid is still it.
	b.proc, err = runtime.OpenProcess(pid)
	return err
}

// prepare builds the bundle: directories, overlay, network, /etc files and
// config.json, pushing an undo for each.
func (r *Runtime) prepare(ctx context.Context, spec runtime.Spec, undo *cleanup.Stack, tr *trace) (_ *netpolicy.Net, retErr error) {
	id := spec.ID
	dir := r.dir(id)
	if _, err := os.Stat(dir); err == nil {
		return nil, fmt.Errorf("sandbox %s: %s exists: %w", id, dir, errdefs.ErrAlreadyExists)
	}
	// The network (netns, veth, nftables) comes up while the sandbox's
	// directories and disk are made and mounted: both are mostly waiting on
	// the kernel, and a second core takes one. It starts first, as it needs
	// nothing from the directory; its teardown is pushed once it is up,
	// whatever fails meanwhile.
	netc := r.setupNet(ctx, id, spec.AllowInternet)
	var nr netResult
	netDone := false
	waitNet := func() netResult {
		if !netDone {
			nr, netDone = <-netc, true
			if nr.err == nil {
				undo.Push(func() error { return r.net.Teardown(context.WithoutCancel(ctx), id) })
			}
		}
		return nr
	}
	defer func() { // an early error still waits for the network, to undo it
		if retErr != nil {
			waitNet()
		}
	}()
	ids, err := r.makeDirs(dir, undo)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	tr.step("dirs")
	undo.Push(func() error { return hostfs.UnmountAll(dir) })
	layerErr := r.mountLayer(ctx, spec, dir, ids, tr)
	waitNet()
	if err := errors.Join(layerErr, nr.err); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	n := nr.n
	tr.step("net_wait")
	tr.attrs = append(tr.attrs, "net_parallel", nr.took.Round(time.Microsecond))
	// Written to the upper dir before mounting, never through the template's symlinks.
	if err := hostfs.WriteEtc(filepath.Join(dir, "disk", "upper"), spec.Hostname, n.SandboxAddr, ids); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	tr.step("etc")
	if err := hostfs.MountRootfs(spec.RootfsDir, dir, ids); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	tr.step("overlay")
	sysDir := filepath.Join(dir, "sys")
	if err := hostfs.MountSysfs(n.NSPath, sysDir); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	tr.step("sysfs")
	cfg := r.o.flavor.spec(ociSpec(spec, n.NSPath, r.cgroupsPath(id), sysDir, ids))
	vms, err := r.volumeMounts(dir, spec.Volumes, ids) // volumes_linux.go
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	cfg.Mounts = append(cfg.Mounts, vms...)
	if r.o.flavor.gvisor != nil {
		cfg.Mounts = append(cfg.Mounts, tmpOnDisk(dir)...) // gvisor_linux.go
	}
	r.addSeccompBPF(ctx, cfg) // seccompbpf_linux.go
	if err := writeJSON(filepath.Join(dir, "config.json"), cfg); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	tr.step("config")
	return n, nil
}

// netResult is what setupNet's goroutine hands back.
type netResult struct {
	n    *netpolicy.Net
	err  error
	took time.Duration
}

// setupNet sets up id's network in a goroutine; the channel gets its result.
func (r *Runtime) setupNet(ctx context.Context, id string, allowInternet bool) <-chan netResult {
	netc := make(chan netResult, 1)
	go func() {
		start := time.Now()
		n, err := r.net.Setup(ctx, id, allowInternet)
		netc <- netResult{n, err, time.Since(start)}
	}()
	return netc
}

// makeDirs makes the sandbox directory dir and its mount points, and
// allocates its ID range, pushing dir's removal.
func (r *Runtime) makeDirs(dir string, undo *cleanup.Stack) (idmap.Range, error) {
	// The sandbox dir belongs to the sandbox's root (the OCI runtime reaches
	// rootfs as that user) and keeps everyone else out; inside it, upper
	// becomes the attributes of the sandbox's "/", which every account must
	// traverse.
	if err := os.Mkdir(dir, 0o700); err != nil {
		return idmap.Range{}, err
	}
	undo.Push(func() error { return hostfs.RemoveDir(dir) })
	if err := hostfs.MakeMountPoints(dir); err != nil {
		return idmap.Range{}, err
	}
	ids, err := r.ids.Allocate(dir)
	if err == nil {
		err = os.Chown(dir, ids.Root(), ids.Root())
	}
	return ids, err
}

// mountLayer mounts the log tmpfs and the sandbox's disk (when it has a
// quota) in dir and makes the overlay's upper and work dirs on it.
func (r *Runtime) mountLayer(ctx context.Context, spec runtime.Spec, dir string, ids idmap.Range, tr *trace) error {
	if err := hostfs.MountLog(dir); err != nil {
		return err
	}
	tr.step("log")
	if spec.DiskMiB > 0 {
		if err := r.disks.Mount(ctx, filepath.Join(dir, "disk.img"), filepath.Join(dir, "disk"), spec.DiskMiB, tr.step); err != nil {
			return err
		}
	}
	for _, d := range []string{"disk/upper", "disk/work"} {
		p := filepath.Join(dir, d)
		if err := os.Mkdir(p, 0o755); err != nil {
			return err
		}
		if err := os.Chown(p, ids.Root(), ids.Root()); err != nil {
			return err
		}
	}
	tr.step("layer")
	return nil
}

// Kill implements runtime.Runtime. It undoes what Create did; for a sandbox
// this process did not create (after a restart) it removes every object named
// after id. Idempotent and safe to call concurrently.
func (r *Runtime) Kill(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	b := r.boxes.Get(id)
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.created && b.slot == nil { // a slot's undos are on b.undo
		r.pushAll(ctx, id, &b.undo)
	}
	err := b.undo.Run()
	b.closeProc() // an adopted container's, which no undo closes
	b.created, b.slot = false, nil
	r.slots.Forget(id)
	r.boxes.Forget(id, b)
	if err != nil {
		return fmt.Errorf("kill sandbox %s: %w", id, err)
	}
	r.log.InfoContext(ctx, "sandbox killed", "sandbox", id)
	return nil
}

// pushAll stacks every by-name undo, in Create's order.
func (r *Runtime) pushAll(ctx context.Context, id string, undo *cleanup.Stack) {
	ctx = context.WithoutCancel(ctx)
	dir := r.dir(id)
	undo.Push(func() error { return hostfs.RemoveDir(dir) })
	undo.Push(func() error { return r.net.Teardown(ctx, id) })
	undo.Push(func() error { return hostfs.UnmountAll(dir) })
	undo.Push(func() error { return r.deleteContainer(ctx, id) })
}

// deleteContainer kills and deletes the container and removes its cgroups:
// `delete -f` kills what still runs (SIGKILL to the container's cgroup)
// before it deletes, so one start of the OCI runtime does both (a `kill`
// first was one start more per kill, ~3 ms of CPU).
func (r *Runtime) deleteContainer(ctx context.Context, id string) error {
	name := r.containerName(id)
	_, err := r.oci.Run(ctx, "delete", "-f", name)
	if errdefs.IsNotFound(err) {
		err = nil
	}
	return errors.Join(err, cgroups.RemoveAll(r.cgroupsPath(id)))
}

// Pause implements runtime.Runtime with the cgroup freezer.
func (r *Runtime) Pause(ctx context.Context, id string) error {
	if _, err := r.oci.Run(ctx, "pause", r.containerName(id)); err != nil {
		return fmt.Errorf("pause sandbox %s: %w", id, err)
	}
	return nil
}

// Resume implements runtime.Runtime: the freezer lets a paused container
// go on (the handle does not change); a sandbox paused to its filesystem
// runs again from its files (fspause_linux.go).
func (r *Runtime) Resume(ctx context.Context, id string) (*runtime.Handle, error) {
	b, ok := r.boxes.Lookup(id)
	if !ok {
		return nil, fmt.Errorf("resume sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.handle == nil {
		return nil, fmt.Errorf("resume sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	if b.fsPaused {
		return r.resumeFilesystem(ctx, id, b)
	}
	if _, err := r.oci.Run(ctx, "resume", r.containerName(id)); err != nil {
		return nil, fmt.Errorf("resume sandbox %s: %w", id, err)
	}
	h := *b.handle
	h.Paused = false
	return &h, nil
}

// Features implements runtime.Runtime: CRIU cannot checkpoint on this
// host's kernel, so a pause is the cgroup freezer (memory stays resident)
// and there are no snapshots (no runtime.Snapshotter).
func (r *Runtime) Features() runtime.Features { return runtime.Features{} }

// Wait implements runtime.Runtime on a pidfd of the container's init; the
// exit code is unknown (the init is not this process's child) but an OOM
// kill in the sandbox's cgroup is reported.
func (r *Runtime) Wait(ctx context.Context, id string) (runtime.ExitStatus, error) {
	var p *runtime.Process
	if b, ok := r.boxes.Lookup(id); ok {
		b.mu.Lock()
		p = b.proc
		b.mu.Unlock()
	}
	if p == nil {
		return runtime.ExitStatus{}, fmt.Errorf("wait for sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	if err := p.Wait(ctx); err != nil {
		return runtime.ExitStatus{}, err
	}
	return runtime.ExitStatus{Code: -1, OOMKilled: cgroups.OOMKills(r.cgroupsPath(id)) > 0}, nil
}

// closeProc releases the pidfd of the init. Caller holds b.mu.
func (b *sandbox) closeProc() {
	if b.proc != nil {
		_ = b.proc.Close()
		b.proc = nil
	}
}

// Stats implements runtime.Runtime from the sandbox's cgroups.
func (r *Runtime) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	if err := validID(id); err != nil {
		return runtime.Stats{}, err
	}
	st, err := cgroups.ReadStats(r.cgroupsPath(id))
	if err != nil {
		return st, err
	}
	st.DiskUsed, st.DiskTotal = hostfs.DiskUsage(r.dir(id))
	return st, nil
}

// Close kills the idle slots and stops making them, then, unless its
// network manager is the server's shared one, releases the network policy when no sandbox is
// left (see netpolicy.Manager.Close; the server closes a shared one).
func (r *Runtime) Close() error {
	err := errors.Join(r.slots.Close(context.Background()), r.oci.Close())
	if r.ownNet {
		err = errors.Join(err, r.net.Close())
	}
	return err
}

// validID reports whether id can name this backend's host objects: up to 64 of [a-z0-9].
func validID(id string) error { return sandboxid.Validate(id, 64) }

func readPID(p string) (int, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("read pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("pid file %s: %w", p, err)
	}
	return pid, nil
}

// LogFiles implements runtime.LogSource: envd's output, on its capped
// tmpfs.
func (r *Runtime) LogFiles(id string) []string { return []string{r.logPath(id)} }
