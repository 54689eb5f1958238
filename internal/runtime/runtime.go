// Package runtime is the seam between the orchestrator and the isolation
// backends (container, gvisor, vm). The orchestrator only sees this
// interface; each backend lives in a subpackage and registers itself by
// name. Several backends can run in one server: they share host objects
// through Config (one network manager, Config.Network).
package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sort"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/netpolicy"
)

// Spec describes a sandbox to create.
type Spec struct {
	ID         string // sandbox ID: lowercase alphanumeric; names every host object
	TemplateID string
	RootfsDir  string // read-only template root filesystem (lower layer)

	VCPUs         int  // CPU limit in cores
	MemoryMiB     int  // memory limit
	DiskMiB       int  // writable layer limit: the container backend enforces it (0 = none), the vm backend sizes the disk from the template
	Pids          int  // process limit
	AllowInternet bool // egress beyond the host (never to the host or other sandboxes)
	Hostname      string

	// Snapshot, when set, starts the sandbox from this snapshot (taken by
	// Runtime.Snapshot) instead of the template: memory, processes and
	// files as they were when it was taken. Backends without snapshots
	// return errdefs.ErrNotImplemented.
	Snapshot string

	// Runtime names the backend to create on when one server runs several
	// (the orchestrator routes by it; "" = the default). Backends ignore it.
	Runtime string

	// Volumes are host directories (mounted volumes, see package volume)
	// to mount read-write in the sandbox; only backends that are
	// VolumeMounters get any.
	Volumes []VolumeMount

	// Background marks a warm-pool member that is not handed out yet: a
	// Foregrounder gives its processes the lowest CPU weight until
	// Foreground, so making it never slows the sandboxes in use. Other
	// backends ignore it.
	Background bool
}

// Foregrounder is implemented by backends that honour Spec.Background.
type Foregrounder interface {
	// Foreground gives sandbox id the normal CPU weight (idempotent).
	Foreground(ctx context.Context, id string) error
}

// Prelauncher is implemented by backends that make sandboxes ahead of the
// request up to the point where the request's own values are needed (the
// microVM backend: files, network and a QEMU waiting for the snapshot; the
// container backend: files, network and a container created, not started).
type Prelauncher interface {
	// Prelaunched reserves a sandbox made ahead for spec (same template
	// build and size; never for Spec.Snapshot or Spec.Volumes) and returns
	// its ID, which the caller must use as Spec.ID: set its egress policy,
	// then Create it, or Kill it. ok is false when there is none.
	Prelaunched(spec Spec) (id string, ok bool)
}

// VolumeMount mounts host directory Source at Target in the sandbox.
type VolumeMount struct {
	Source string // absolute host path
	Target string // absolute, clean path in the sandbox
}

// VolumeMounter is implemented by backends that mount Spec.Volumes.
type VolumeMounter interface {
	MountsVolumes() bool
}

// Handle is a running sandbox as a backend sees it.
type Handle struct {
	ID      string
	Runtime string     // backend name
	Addr    netip.Addr // address at which the host reaches the sandbox's ports (envd on 49983)
	PID     int        // main process on the host (0 if unknown or paused to disk)
	// Paused is set by Recover for a sandbox that is paused: frozen in
	// memory (container) or saved to disk with no process (vm).
	Paused bool
}

// Features says what a backend's Pause does.
type Features struct {
	// PauseToDisk: Pause saves memory and device state to disk and frees
	// the sandbox's RAM; a paused sandbox survives a host reboot. Without
	// it, Pause freezes the processes and memory stays resident.
	PauseToDisk bool
}

// FilesystemPauser is implemented by backends that can pause a sandbox
// keeping only its files (E2B's pause with memory: false): its processes
// end and its memory goes back to the host, its disk stays, and Resume
// boots it again from that disk (Handle.Paused after Recover, as for any
// pause). The caller has the guest sync its files first (through envd,
// with the sandbox's token): a microVM's page cache goes with its memory.
// The others answer such a pause with errdefs.ErrNotImplemented.
type FilesystemPauser interface {
	PauseFilesystem(ctx context.Context, id string) error
}

// LogSource is implemented by backends that keep a sandbox's own output:
// envd's log (containers and gVisor) or the guest's serial console, which
// carries envd's log after the guest's boot (microVMs). LogFiles names the
// files, oldest first; a reader skips those that do not exist.
type LogSource interface {
	LogFiles(id string) []string
}

// Snapshotter is implemented by backends that can save a running sandbox
// and start new ones from it (Spec.Snapshot); the others answer
// errdefs.ErrNotImplemented to a create from a snapshot.
type Snapshotter interface {
	// Snapshot saves a running sandbox's memory and disk as snapshot
	// snapID (an ID of the same alphabet as sandbox IDs), stopping the
	// sandbox only while it saves. Sandboxes created from a snapshot do
	// not depend on it: deleting it later does not affect them.
	Snapshot(ctx context.Context, id, snapID string) error
	// DeleteSnapshot removes a snapshot; unknown IDs succeed.
	DeleteSnapshot(ctx context.Context, snapID string) error
}

// BuildRuntimer is implemented by backends whose own sandboxes cannot be
// template build sandboxes (the build writes a sandbox's file changes
// into a root filesystem tree, which needs a disk the host can read as a
// directory, as the container backend's overlay upper dir is). It returns
// the runtime build sandboxes run on instead, sharing the caller's host
// state (network manager, ID space); the caller must not Close it.
type BuildRuntimer interface {
	BuildRuntime(ctx context.Context) (Runtime, error)
}

// Stats is a point-in-time resource reading.
type Stats struct {
	CPUUsageNs  uint64
	MemoryBytes uint64
	MemoryLimit uint64
	Pids        uint64
	DiskUsed    uint64 // bytes used of the sandbox's own disk; 0 when unknown
	DiskTotal   uint64 // its size; 0 when the backend does not know it
	Time        time.Time
}

// ExitStatus is how a sandbox's process ended.
type ExitStatus struct {
	// Code is the exit code, -1 when a signal ended it or when it is
	// unknown (a process this server did not start: its parent reaps it).
	Code int
	// Signal is the signal that killed it (0 when none or unknown).
	Signal int
	// OOMKilled: the kernel's OOM killer killed a process of the sandbox.
	OOMKilled bool
}

// String says the status in a word or two ("exit 0", "signal 9", "oom").
func (s ExitStatus) String() string {
	switch {
	case s.OOMKilled:
		return "oom"
	case s.Signal != 0:
		return fmt.Sprintf("signal %d", s.Signal)
	case s.Code >= 0:
		return fmt.Sprintf("exit %d", s.Code)
	}
	return "exited"
}

// Runtime is implemented by every isolation backend. All methods are safe for
// concurrent use with different IDs.
type Runtime interface {
	// Name is the registered name ("container", "vm", "gvisor").
	Name() string
	// Create starts a sandbox whose envd listens on Handle.Addr:49983.
	Create(ctx context.Context, spec Spec) (*Handle, error)
	// Kill stops the sandbox and frees every host object named after id.
	// Killing an unknown or already-dead sandbox succeeds.
	Kill(ctx context.Context, id string) error
	// Features describes what Pause does.
	Features() Features
	// Pause stops the sandbox's processes, keeping its memory, processes
	// and files. It either completes or leaves the sandbox running: a crash
	// in the middle never leaves a half-written pause behind.
	Pause(ctx context.Context, id string) error
	// Resume continues a paused sandbox, also one paused by an earlier
	// server process (after Recover). The handle may differ from the one
	// before the pause (new process, new address). An error with a nil
	// handle leaves the sandbox paused; an error with a handle means it
	// runs again but did not come back healthy.
	Resume(ctx context.Context, id string) (*Handle, error)
	// Stats reads resource usage.
	Stats(ctx context.Context, id string) (Stats, error)
	// Wait blocks until the sandbox's process (a container's init, a VM's
	// QEMU) exits, and says how. It returns at once, with an
	// errdefs.ErrNotFound error, for a sandbox that has no process (unknown,
	// killed, or paused to disk); ctx.Err() when ctx ends first. A pause to
	// disk ends the wait too, so callers check their own view of the
	// sandbox's state before calling its end a death.
	Wait(ctx context.Context, id string) (ExitStatus, error)
	// Recover is called at server start with the IDs the store believes are
	// live (running or paused): it returns handles for those it still has,
	// running or paused (Handle.Paused), and removes every host object of
	// any other sandbox this backend ever created. Snapshots are kept.
	Recover(ctx context.Context, live []string) ([]*Handle, error)
}

// Constructor builds a backend; dataDir is the server's data directory.
type Constructor func(ctx context.Context, cfg Config) (Runtime, error)

// Config is what every backend gets from the server.
type Config struct {
	DataDir string
	Logger  *slog.Logger
	// Network is the network manager every backend of the server uses
	// (addresses, nftables rules and the Recover of networks are
	// host-wide, so there is one); nil when a backend runs alone and
	// makes its own.
	Network *netpolicy.Manager
	// BuildRuntime makes the runtime of template build sandboxes for a
	// backend whose own sandboxes cannot be them (runtime.BuildRuntimer):
	// the server's container backend with its settings (internal/app);
	// nil: the registered "container" backend with its defaults.
	BuildRuntime func(ctx context.Context, cfg Config) (Runtime, error)
	// Host is what every backend of the server shares about the host.
	// Each backend's own settings are a Settings type of its package,
	// which it validates itself; internal/app passes them.
	Host Host
}

// Host is what the backends of one server share about the host: the
// server's scope. Scope 1–MaxScope names every host object of the server
// apart from the host scope's (0) and the other scopes' (see ScopeCgroup):
// a test server beside another on one host (scripts/test.sh runs two e2e
// lanes at once). Production servers use the host scope.
type Host struct {
	Scope int
}

// MaxScope is the highest Host.Scope.
const MaxScope = 9

// ScopeCgroup is the cgroup the scope's sandboxes live under: "/moat",
// or "/moat-s<N>" in scope N. The scope's other names: OCI state under
// ScopeStateDir, the netpolicy.WithTestScope network names and
// addresses, idmap ranges from ScopeFirstSlot, the host lock
// /run/moat/serve-s<N>.lock (app).
func (b Host) ScopeCgroup() string {
	if b.Scope == 0 {
		return "/moat"
	}
	return fmt.Sprintf("/moat-s%d", b.Scope)
}

// ScopeStateDir is the directory under which the scope keeps per-host
// state (OCI runtimes' roots): "/run/moat", or "/run/moat/s<N>".
func (b Host) ScopeStateDir() string {
	if b.Scope == 0 {
		return "/run/moat"
	}
	return fmt.Sprintf("/run/moat/s%d", b.Scope)
}

// ScopeFirstSlot is the first idmap slot of the scope's ID ranges, so
// that sandboxes of two scopes never share host IDs.
func (b Host) ScopeFirstSlot() uint32 { return uint32(b.Scope) * 4096 }

// Count is the number a backend uses for one of its settings' counts n
// (0 = the backend's default def, negative = none).
func Count(n, def int) int {
	if n == 0 {
		return def
	}
	return max(n, 0)
}

var (
	regMu    sync.Mutex
	registry = map[string]Constructor{}
)

// Register makes a backend available under name; called from init.
func Register(name string, c Constructor) {
	regMu.Lock()
	defer regMu.Unlock()
	registry[name] = c
}

// New constructs the backend registered as name.
func New(ctx context.Context, name string, cfg Config) (Runtime, error) {
	regMu.Lock()
	c, ok := registry[name]
	regMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("runtime %q is not available (have %v)", name, Names())
	}
	return c(ctx, cfg)
}

// Names lists the registered backends.
func Names() []string {
	regMu.Lock()
	defer regMu.Unlock()
	var out []string
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
