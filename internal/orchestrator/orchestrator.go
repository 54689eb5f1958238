package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/admission"
	"github.com/moatsh/moat/internal/dialrace"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/events"
	"github.com/moatsh/moat/internal/orchestrator/clock"
	"github.com/moatsh/moat/internal/orchestrator/envdcall"
	"github.com/moatsh/moat/internal/orchestrator/livetable"
	"github.com/moatsh/moat/internal/orchestrator/reaper"
	"github.com/moatsh/moat/internal/orchestrator/runtimeset"
	"github.com/moatsh/moat/internal/orchestrator/sandboxspec"
	"github.com/moatsh/moat/internal/orchestrator/usage"
	"github.com/moatsh/moat/internal/orchestrator/warmpool"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
)

// Defaults for Config fields left zero.
const (
	DefaultTimeout      = 300 * time.Second
	DefaultMaxTimeout   = 24 * time.Hour
	DefaultVCPUs        = sandboxspec.DefaultVCPUs
	DefaultMemoryMiB    = sandboxspec.DefaultMemoryMiB
	DefaultDiskMiB      = sandboxspec.DefaultDiskMiB
	DefaultEnvdPort     = 49983
	DefaultReadyTimeout = 30 * time.Second
	killTimeout         = 30 * time.Second
)

// Config is what the orchestrator needs: Store, and Runtime or Runtimes.
type Config struct {
	Store   Store
	Runtime runtime.Runtime
	// Runtimes are several backends side by side (Runtime is then unset):
	// the first is the default; a create picks another through its
	// template or metadata (see MetadataRuntime).
	Runtimes []runtime.Runtime
	Logger   *slog.Logger

	MaxTimeout   time.Duration // longest lifetime of a sandbox (default 24 h)
	MaxVCPUs     int           // per-sandbox ceilings (0 = no ceiling)
	MaxMemoryMiB int
	MaxDiskMiB   int

	// Admission bounds creates, resumes, pauses and snapshots running at
	// once and refuses what the host has no room for; nil admits all.
	Admission *admission.Controller

	// Pools are the warm pools StartPools keeps filled (see package warmpool).
	Pools []PoolSpec
	// EgressCA is the egress proxy's CA certificate (PEM), which sandboxes
	// with network.rules headers trust; nil refuses such rules.
	EgressCA []byte

	// Clock is the time of timeouts (default the real one; tests inject a
	// fake so that timeouts fire at once).
	Clock clock.Clock

	EnvdPort     int           // envd's port inside the sandbox (default 49983; tests change it)
	ReadyTimeout time.Duration // how long Create waits for envd (default 30 s)
	// MetricsEvery is how often Run reads every running sandbox's usage
	// into the history Metrics answers from (default usage.CollectEvery).
	MetricsEvery time.Duration
	HTTPClient   *http.Client // for envd /health and /init

	// NodeID names this server in the store's node registry (package
	// cluster); every sandbox it creates records it.
	NodeID string

	// Events receives the sandboxes' lifecycle events (package events;
	// webhook.Service.Record stores and delivers them); nil drops them.
	// It is called under the sandbox's lock and must not block for long.
	Events func(ctx context.Context, ev events.Event)
}

// VolumeMount is a volume a create mounts (see sandboxspec.AddVolumes).
type VolumeMount = sandboxspec.VolumeMount

// CreateRequest is a validated create call.
type CreateRequest struct {
	Team          string // the caller's team: owns the sandbox (required)
	Template      string // template ID or name, or a snapshot ID or name of Team
	Timeout       time.Duration
	Metadata      map[string]string
	EnvVars       map[string]string
	Secure        bool // issue an envd access token
	AllowInternet bool
	AutoPause     bool
	AutoResume    bool // proxy traffic resumes it when paused (needs AutoPause)
	AutoPauseFS   bool // the auto-pause keeps only the files (E2B's autoPauseMemory: false)
	// AllowOut and DenyOut are E2B's network.allowOut/denyOut (IPs and
	// CIDR blocks; validated here).
	AllowOut []string
	DenyOut  []string
	Rules    []store.NetworkRule // network.rules, validated (secrets.ParseRules, CheckReachable)
	// PrivateTraffic (E2B's allowPublicTraffic: false) issues a traffic
	// access token that the proxy then requires for the sandbox's ports.
	PrivateTraffic bool
	// Volumes to mount (the caller holds their host mounts for the
	// sandbox's life; see volumes.go).
	Volumes []VolumeMount
}

// Orchestrator is safe for concurrent use.
type Orchestrator struct {
	cfg   Config
	db    Store
	rt    runtime.Runtime // rts: routes each call to the sandbox's backend
	rts   *runtimeset.Set
	log   *slog.Logger
	envd  *envdcall.Client
	usage usage.Reader

	live *livetable.Table // the live sandboxes

	pools *warmpool.Pools

	clock  clock.Clock
	reaper *reaper.Reaper // timers and process watches (see Run)

	// snapUse is held shared by creates from a snapshot while the runtime
	// copies it, and exclusively by DeleteSnapshot, so a delete waits for
	// those copies instead of pulling the files from under them.
	snapUse sync.RWMutex
}

// entry is one live sandbox (see package livetable).
type entry = livetable.Entry

// New returns an orchestrator. Call Recover once, then run Run in a goroutine.
func New(cfg Config) (*Orchestrator, error) {
	if cfg.Store == nil || (cfg.Runtime == nil && len(cfg.Runtimes) == 0) {
		return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "orchestrator: store and runtime are required")
	}
	rts, err := runtimeset.New(append([]runtime.Runtime{cfg.Runtime}, cfg.Runtimes...))
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxTimeout <= 0 {
		cfg.MaxTimeout = DefaultMaxTimeout
	}
	if cfg.EnvdPort == 0 {
		cfg.EnvdPort = DefaultEnvdPort
	}
	if cfg.MetricsEvery <= 0 {
		cfg.MetricsEvery = usage.CollectEvery
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = DefaultReadyTimeout
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = envdHTTPClient()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	o := &Orchestrator{cfg: cfg, db: cfg.Store, rt: rts, rts: rts, log: cfg.Logger,
		envd: &envdcall.Client{HTTP: cfg.HTTPClient, Port: cfg.EnvdPort, ReadyTimeout: cfg.ReadyTimeout, Log: cfg.Logger,
			Waiter: rts, EgressCA: cfg.EgressCA},
		live:  livetable.New(),
		clock: cfg.Clock}
	o.reaper = reaper.New(cfg.Clock, reaper.Hooks{Wait: rts.Wait, Expire: o.expire, Died: o.died})
	o.usage = usage.Reader{Stats: rts.Stats, Disk: o.envd.Disk, Log: cfg.Logger}
	o.pools = warmpool.New(poolSource{o}, cfg.Logger)
	return o, nil
}

// MaxTimeout is the longest lifetime a sandbox may be given.
func (o *Orchestrator) MaxTimeout() time.Duration { return o.cfg.MaxTimeout }

// RuntimeName is the default backend.
func (o *Orchestrator) RuntimeName() string { return o.rt.Name() }

// Create starts a sandbox owned by req.Team and returns once envd inside it
// is initialised. Errors: ErrNotFound (template, or a snapshot the team does
// not have), ErrInvalidArgument (team, timeout, envVars, limits),
// ErrUnavailable (envd never became ready), or the runtime's error.
func (o *Orchestrator) Create(ctx context.Context, req CreateRequest) (_ store.Sandbox, retErr error) {
	allowOut, denyOut, err := o.checkCreate(req)
	if err != nil {
		return store.Sandbox{}, err
	}
	tpl, snap, err := o.source(ctx, req.Team, req.Template)
	if err != nil {
		return store.Sandbox{}, err
	}
	if snap == nil && len(req.Volumes) == 0 { // pool members mount nothing
		if sb, ok := o.createPooled(ctx, req, tpl, store.Network{AllowOut: allowOut, DenyOut: denyOut, Rules: req.Rules}); ok {
			return sb, nil
		}
	}
	spec, err := o.spec(tpl, req)
	if err != nil {
		return store.Sandbox{}, err
	}
	envVars, current := req.EnvVars, ""
	if snap != nil {
		current = snap.EnvdAccessToken
		spec.Snapshot, spec.VCPUs, spec.MemoryMiB, spec.DiskMiB = snap.ID, snap.CPUCount, snap.MemoryMB, snap.DiskSizeMB
		spec.Runtime = snap.Runtime
		envVars = envdcall.MergeEnv(snap.EnvVars, req.EnvVars)
	}
	sb := o.newSandbox(req, tpl, spec, envVars, store.Network{AllowOut: allowOut, DenyOut: denyOut, Rules: req.Rules})
	if err := sandboxspec.AddVolumes(&spec, &sb, req.Volumes, o.rts.CheckVolumes); err != nil {
		return store.Sandbox{}, err
	}
	defer o.live.HoldTemplate(tpl.ID)()
	release, err := o.admit(ctx, admission.Request{Op: "create", Team: req.Team,
		Need: admission.Need{MemoryMiB: spec.MemoryMiB, DiskMiB: spec.DiskMiB}})
	if err != nil {
		return store.Sandbox{}, err
	}
	defer release()
	// A sandbox made ahead (runtime.Prelauncher; its policy is set beside its
	// start, see runtimeset.Set.ApplyEgress) lends its ID; the deferred Kill frees it.
	if id, ok := o.rts.Prelaunched(spec); ok {
		spec.ID, sb.ID = id, id
	}
	log := o.log.With("sandboxID", sb.ID, "template", tpl.Name)
	defer func() {
		if retErr != nil {
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
			defer cancel()
			if err := o.rt.Kill(kctx, sb.ID); err != nil {
				log.Error("cleanup after failed create", "err", err)
			}
			_ = o.db.DeleteSandbox(kctx, sb.ID)
			log.Warn("create failed", "err", retErr)
			retErr = errdefs.WithCode(retErr, errdefs.CodeCreateFailed)
		}
	}()
	// The policy is in place before the sandbox's network comes up.
	if err := o.applyEgress(ctx, sb); err != nil {
		return store.Sandbox{}, fmt.Errorf("create sandbox %s: %w", sb.ID, err)
	}
	// The template's build may have set env, workdir, user and a start
	// command (E2B's ENV/WORKDIR/USER steps, setStartCmd).
	tc, err := o.db.TemplateConfigOf(ctx, tpl.ID)
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("create sandbox %s: %w", sb.ID, err)
	}
	h, err := o.createRuntime(ctx, req.Team, spec)
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("create sandbox %s: %w", sb.ID, err)
	}
	sb.Addr = h.Addr.String()
	if err := o.envd.Init(ctx, h.Addr, sb, tc, current); err != nil {
		return store.Sandbox{}, fmt.Errorf("create sandbox %s: %w", sb.ID, err)
	}
	if snap == nil { // a snapshot's processes already run
		if err := o.envd.StartTemplateCmd(ctx, h.Addr, sb, tc, tpl.RootfsDir); err != nil {
			return store.Sandbox{}, fmt.Errorf("create sandbox %s: %w", sb.ID, err)
		}
	}
	sb.StartedAt = o.clock.Now().UTC()
	sb.EndAt = sb.StartedAt.Add(req.Timeout)
	if err := o.db.InsertSpawnedSandbox(ctx, sb); err != nil { // one commit: record and spawn count
		return store.Sandbox{}, err
	}
	o.add(sb, h.Addr)
	o.emit(ctx, events.Created, sb, withMetadata(nil, sb))
	log.Info("sandbox created", "addr", sb.Addr, "runtime", sb.Runtime)
	return sb, nil
}

// newSandbox is the store record of a sandbox about to be created, with
// fresh access tokens where the request asks for them.
func (o *Orchestrator) newSandbox(req CreateRequest, tpl store.Template, spec runtime.Spec, envVars map[string]string,
	network store.Network) store.Sandbox {
	sb := store.Sandbox{ID: spec.ID, Team: req.Team, TemplateID: tpl.ID, Alias: tpl.Name, State: store.StateRunning,
		Runtime: spec.Runtime, Metadata: req.Metadata, EnvVars: envVars, Secure: req.Secure,
		AllowInternet: req.AllowInternet, AutoPause: req.AutoPause, AutoResume: req.AutoResume && req.AutoPause,
		AutoPauseFilesystem: req.AutoPauseFS && req.AutoPause,
		Timeout:             req.Timeout, CPUCount: spec.VCPUs, MemoryMB: spec.MemoryMiB, DiskSizeMB: spec.DiskMiB,
		Network: network, NodeID: o.cfg.NodeID}
	if req.Secure {
		sb.EnvdAccessToken = sandboxspec.RandomHex(32)
	}
	if req.PrivateTraffic {
		sb.Network.TrafficAccessToken = sandboxspec.RandomHex(32)
	}
	return sb
}

// checkCreate validates what a create request carries besides its
// template: team, timeout, envVars and the network lists (returned in
// canonical form).
func (o *Orchestrator) checkCreate(req CreateRequest) (allowOut, denyOut []string, err error) {
	if err := store.ValidateTeam(req.Team); err != nil {
		return nil, nil, err
	}
	if err := o.checkTimeout(req.Timeout); err != nil {
		return nil, nil, err
	}
	if err := sandboxspec.CheckEnvVars(req.EnvVars); err != nil {
		return nil, nil, err
	}
	return CanonicalNetwork(req.AllowOut, req.DenyOut)
}

// createRuntime asks the runtime for the sandbox; one from a snapshot holds
// snapUse shared while the runtime copies it, after checking that the
// snapshot was not deleted meanwhile.
func (o *Orchestrator) createRuntime(ctx context.Context, team string, spec runtime.Spec) (*runtime.Handle, error) {
	if spec.Snapshot != "" {
		o.snapUse.RLock()
		defer o.snapUse.RUnlock()
		if _, err := o.db.GetSnapshot(ctx, team, spec.Snapshot); err != nil {
			if errdefs.IsNotFound(err) {
				err = errdefs.Publicf(errdefs.ErrNotFound, "snapshot %s was deleted", spec.Snapshot)
			}
			return nil, err
		}
	}
	return o.rt.Create(ctx, spec)
}

// source resolves a create's template reference: a template ID or name
// (CLI-built templates are shared by every team; API-built ones are their
// team's, and another team's is not found), else an ID or name of one of team's
// snapshots (snap is then set; tpl is its template, which may since have
// been deleted: only its ID and name are filled). Another team's snapshot
// is not found, exactly like an unknown reference.
func (o *Orchestrator) source(ctx context.Context, team, ref string) (tpl store.Template, snap *store.Snapshot, err error) {
	tpl, err = o.db.GetTeamTemplate(ctx, team, ref) // shared, or built by team over the API
	if err == nil {
		return tpl, nil, nil
	}
	if !errdefs.IsNotFound(err) {
		return tpl, nil, err
	}
	s, serr := o.db.GetSnapshot(ctx, team, ref)
	if serr != nil {
		if errdefs.IsNotFound(serr) {
			return tpl, nil, errdefs.Publicf(errdefs.ErrNotFound, "template '%s' not found", ref)
		}
		return tpl, nil, serr
	}
	if _, err := o.rts.Named(s.Runtime); err != nil {
		return tpl, nil, errdefs.Publicf(errdefs.ErrFailedPrecondition, "snapshot %s was taken with the %s runtime; this server runs %s", s.ID, s.Runtime, strings.Join(o.rts.Names(), ", "))
	}
	tpl, err = o.db.GetTemplate(ctx, s.TemplateID)
	if err != nil {
		if !errdefs.IsNotFound(err) {
			return tpl, nil, err
		}
		tpl = store.Template{ID: s.TemplateID, Name: s.Alias}
	}
	return tpl, &s, nil
}

// checkTimeout reports whether d is a lifetime within (0, MaxTimeout].
func (o *Orchestrator) checkTimeout(d time.Duration) error { return o.limits().CheckTimeout(d) }

// limits are the configured ceilings.
func (o *Orchestrator) limits() sandboxspec.Limits {
	return sandboxspec.Limits{MaxTimeout: o.cfg.MaxTimeout, MaxVCPUs: o.cfg.MaxVCPUs,
		MaxMemoryMiB: o.cfg.MaxMemoryMiB, MaxDiskMiB: o.cfg.MaxDiskMiB}
}

// spec is the runtime.Spec of a new sandbox of tpl for req.
func (o *Orchestrator) spec(tpl store.Template, req CreateRequest) (runtime.Spec, error) {
	rt, err := o.chooseRuntime(tpl.Runtime, req.Metadata)
	if err != nil {
		return runtime.Spec{}, err
	}
	return o.limits().Spec(tpl, rt, req.AllowInternet)
}

// Get returns one of team's live sandboxes; ErrNotFound when it is unknown,
// killed, or another team's.
func (o *Orchestrator) Get(ctx context.Context, team, id string) (store.Sandbox, error) {
	return o.live.Get(team, id)
}

// List returns team's sandboxes from the store; f.Team is overridden.
func (o *Orchestrator) List(ctx context.Context, team string, f store.SandboxFilter) ([]store.Sandbox, error) {
	if team == "" {
		return nil, errNoTeam
	}
	f.Team = team
	return o.db.ListSandboxes(ctx, f)
}

// errNoTeam is a programming error: a team-scoped call without a team.
var errNoTeam = errdefs.Publicf(errdefs.ErrInvalidArgument, "orchestrator: no team given")

// Route is where a sandbox's traffic goes right now (the proxy's view).
type Route struct {
	Addr       netip.Addr
	Token      string // envd access token ("" = none)
	State      store.State
	AutoResume bool
	Gen        uint64 // bumped by every resume: connections from before are stale
	// TrafficToken, when set, must be sent as e2b-traffic-access-token to
	// reach the sandbox's ports other than envd's.
	TrafficToken string
}

// Lookup is the proxy's cheap route to a live sandbox; ok is false for
// unknown sandboxes.
func (o *Orchestrator) Lookup(id string) (Route, bool) {
	sb, addr, gen, ok := o.live.Route(id)
	if !ok {
		return Route{}, false
	}
	return Route{Addr: addr, Token: sb.EnvdAccessToken, State: sb.State, AutoResume: sb.AutoResume, Gen: gen,
		TrafficToken: sb.Network.TrafficAccessToken}, true
}

func errNotFound(id string) error { return livetable.ErrNotFound(id) }

// ErrSandboxNotFound is the error, of kind errdefs.ErrNotFound, for a
// sandbox id that does not exist or belongs to another team; the REST
// layer answers malformed IDs with it too.
func ErrSandboxNotFound(id string) error {
	return livetable.ErrNotFound(id)
}

// add makes sb live (routable) and, once Run runs, tracks its timeout and
// process.
func (o *Orchestrator) add(sb store.Sandbox, addr netip.Addr) {
	o.track(o.live.Add(sb, addr))
}

// admit asks the admission controller for a slot for op; without one every
// operation is admitted at once.
func (o *Orchestrator) admit(ctx context.Context, r admission.Request) (release func(), err error) {
	if o.cfg.Admission == nil {
		return func() {}, nil
	}
	return o.cfg.Admission.Admit(ctx, r)
}

// Admission is the admission controller (nil: every operation is
// admitted at once), for its Stats and Refusals.
func (o *Orchestrator) Admission() *admission.Controller { return o.cfg.Admission }

// Reserved is what the live sandboxes reserve on the host: the memory of
// running ones (a paused microVM holds none) and the disk of all, plus the
// warm pools' members.
func (o *Orchestrator) Reserved() admission.Need {
	n, m := o.pools.Reserved(), o.live.Reserved()
	n.MemoryMiB += m.MemoryMiB
	n.DiskMiB += m.DiskMiB
	return n
}

// envdHTTPClient is the default Config.HTTPClient. It pools no
// connection: a pooled one is keyed by address, and a killed sandbox's
// address soon belongs to a new sandbox. A killed microVM or gVisor
// sandbox never closes its connections, so the pool would hand the new
// sandbox's /init or /metrics the old sandbox's connection. The new
// sandbox resets it, and the call fails; or, when conntrack takes the
// reset for invalid (the old connection's entry went with the teardown),
// the firewall drops it and the call waits out its timeout. One connect
// more per call costs ~0.1 ms on a veth.
func envdHTTPClient() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: dialrace.NewTransport()}
}

// OnKill registers fn, called with the ID of every sandbox about to be
// killed (by request or timeout), while it still runs and before its
// network goes: the proxy resets its connections to it then, which the
// sandbox still receives, instead of closing them after the teardown,
// when their FINs go unanswered and their orphaned sockets send them again
// to the next sandbox given the address. fn must not call back into this
// sandbox.
func (o *Orchestrator) OnKill(fn func(id string)) { o.live.OnKill(fn) }

// OnRemove registers fn, called with the ID of every sandbox that leaves
// the routing table (killed through the API, timed out, or found dead),
// after Lookup stops finding it (under the sandbox's op lock, without
// the table's lock: fn must not call back into this sandbox). The proxy
// closes its connections to the sandbox there: a killed microVM or gVisor
// sandbox never resets them. Call it before serving.
func (o *Orchestrator) OnRemove(fn func(id string)) { o.live.OnRemove(fn) }
