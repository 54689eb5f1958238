package orchestrator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/admission"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
)

// Defaults for Config fields left zero.
const (
	DefaultTimeout      = 300 * time.Second
	DefaultMaxTimeout   = 24 * time.Hour
	DefaultVCPUs        = 2
	DefaultMemoryMiB    = 512
	DefaultPids         = 1024
	DefaultDiskMiB      = 2048
	DefaultEnvdPort     = 49983
	DefaultReadyTimeout = 30 * time.Second
	killTimeout         = 30 * time.Second
)

// Config is what the orchestrator needs: Store, and Runtime or Runtimes.
type Config struct {
	Store   *store.DB
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

	// Pools are the warm pools StartPools keeps filled (see pool.go).
	Pools []PoolSpec

	EnvdPort     int           // envd's port inside the sandbox (default 49983; tests change it)
	ReadyTimeout time.Duration // how long Create waits for envd (default 30 s)
	HTTPClient   *http.Client  // for envd /health and /init
}

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
	// AllowOut and DenyOut are E2B's network.allowOut/denyOut (IPs and
	// CIDR blocks; validated here).
	AllowOut []string
	DenyOut  []string
	// PrivateTraffic (E2B's allowPublicTraffic: false) issues a traffic
	// access token that the proxy then requires for the sandbox's ports.
	PrivateTraffic bool
}

// Metric is one resource reading of a running sandbox.
type Metric struct {
	Time       time.Time
	CPUCount   int
	CPUUsedPct float64
	MemUsed    uint64
	MemTotal   uint64
	MemCache   uint64
	DiskUsed   uint64
	DiskTotal  uint64
}

// Orchestrator is safe for concurrent use.
type Orchestrator struct {
	cfg  Config
	db   *store.DB
	rt   runtime.Runtime // rts: routes each call to the sandbox's backend
	rts  *runtimeSet
	log  *slog.Logger
	http *http.Client

	mu   sync.RWMutex
	live map[string]*entry // guarded by mu; only running/paused (and transitional) sandboxes
	// creating counts the creates under way per template ID (guarded by
	// mu), so that template garbage collection leaves their files alone.
	creating map[string]int

	poolMu sync.Mutex
	pools  []*pool // guarded by poolMu
	poolWG sync.WaitGroup

	// snapUse is held shared by creates from a snapshot while the runtime
	// copies it, and exclusively by DeleteSnapshot, so a delete waits for
	// those copies instead of pulling the files from under them.
	snapUse sync.RWMutex
}

// entry is one live sandbox.
type entry struct {
	op sync.Mutex // serialises lifecycle operations on this sandbox

	// guarded by Orchestrator.mu
	sb      store.Sandbox
	addr    netip.Addr
	gen     uint64 // resumes so far
	gone    bool
	reaping bool
	lastCPU uint64
	lastAt  time.Time
}

// New returns an orchestrator. Call Recover once, then run Run in a goroutine.
func New(cfg Config) (*Orchestrator, error) {
	if cfg.Store == nil || (cfg.Runtime == nil && len(cfg.Runtimes) == 0) {
		return nil, fmt.Errorf("orchestrator: store and runtime are required: %w", errdefs.ErrInvalidArgument)
	}
	rts, err := newRuntimeSet(append([]runtime.Runtime{cfg.Runtime}, cfg.Runtimes...))
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
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = DefaultReadyTimeout
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 5 * time.Second}
	}
	return &Orchestrator{cfg: cfg, db: cfg.Store, rt: rts, rts: rts, log: cfg.Logger,
		http: cfg.HTTPClient, live: map[string]*entry{}, creating: map[string]int{}}, nil
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
	if snap == nil {
		if sb, ok := o.createPooled(ctx, req, tpl, store.Network{AllowOut: allowOut, DenyOut: denyOut}); ok {
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
		envVars = mergeEnv(snap.EnvVars, req.EnvVars)
	}
	sb := o.newSandbox(req, tpl, spec, envVars, store.Network{AllowOut: allowOut, DenyOut: denyOut})
	defer o.holdTemplate(tpl.ID)()
	release, err := o.admit(ctx, "create", admission.Need{MemoryMiB: spec.MemoryMiB, DiskMiB: spec.DiskMiB})
	if err != nil {
		return store.Sandbox{}, err
	}
	defer release()
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
	if err := o.initEnvd(ctx, h.Addr, sb, tc, current); err != nil {
		return store.Sandbox{}, fmt.Errorf("create sandbox %s: %w", sb.ID, err)
	}
	if snap == nil { // a snapshot's processes already run
		if err := o.startTemplateCmd(ctx, h.Addr, sb, tc, tpl.RootfsDir); err != nil {
			return store.Sandbox{}, fmt.Errorf("create sandbox %s: %w", sb.ID, err)
		}
	}
	sb.StartedAt = time.Now().UTC()
	sb.EndAt = sb.StartedAt.Add(req.Timeout)
	if err := o.db.InsertSandbox(ctx, sb); err != nil {
		return store.Sandbox{}, err
	}
	if err := o.db.MarkTemplateSpawned(ctx, tpl.ID, sb.StartedAt); err != nil {
		log.Warn("spawn statistics", "err", err)
	}
	o.mu.Lock()
	o.live[sb.ID] = &entry{sb: sb, addr: h.Addr}
	o.mu.Unlock()
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
		Timeout: req.Timeout, CPUCount: spec.VCPUs, MemoryMB: spec.MemoryMiB, DiskSizeMB: spec.DiskMiB,
		Network: network}
	if req.Secure {
		sb.EnvdAccessToken = randomHex(32)
	}
	if req.PrivateTraffic {
		sb.Network.TrafficAccessToken = randomHex(32)
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
	if err := checkEnvVars(req.EnvVars); err != nil {
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
				err = fmt.Errorf("snapshot %s was deleted: %w", spec.Snapshot, errdefs.ErrNotFound)
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
			return tpl, nil, fmt.Errorf("template '%s' not found: %w", ref, errdefs.ErrNotFound)
		}
		return tpl, nil, serr
	}
	if _, err := o.rts.named(s.Runtime); err != nil {
		return tpl, nil, fmt.Errorf("snapshot %s was taken with the %s runtime; this server runs %s: %w",
			s.ID, s.Runtime, strings.Join(o.rts.Names(), ", "), errdefs.ErrFailedPrecondition)
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

func mergeEnv(base, over map[string]string) map[string]string {
	if len(base) == 0 {
		return over
	}
	out := make(map[string]string, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

func (o *Orchestrator) checkTimeout(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("Timeout must be greater than 0: %w", errdefs.ErrInvalidArgument)
	}
	if d > o.cfg.MaxTimeout {
		return fmt.Errorf("Timeout cannot be greater than %s: %w", fmtHours(o.cfg.MaxTimeout), errdefs.ErrInvalidArgument)
	}
	return nil
}

func fmtHours(d time.Duration) string {
	if d%time.Hour == 0 {
		return fmt.Sprintf("%d hours", int(d/time.Hour))
	}
	return d.String()
}

func (o *Orchestrator) spec(tpl store.Template, req CreateRequest) (runtime.Spec, error) {
	s := runtime.Spec{ID: "i" + randomID(20), TemplateID: tpl.ID, RootfsDir: tpl.RootfsDir,
		VCPUs: DefaultVCPUs, MemoryMiB: DefaultMemoryMiB, DiskMiB: DefaultDiskMiB, Pids: DefaultPids,
		AllowInternet: req.AllowInternet, Hostname: "e2b"}
	var err error
	if s.Runtime, err = o.chooseRuntime(tpl.Runtime, req.Metadata); err != nil {
		return s, err
	}
	if tpl.CPUCount > 0 {
		s.VCPUs = tpl.CPUCount
	}
	if tpl.MemoryMB > 0 {
		s.MemoryMiB = tpl.MemoryMB
	}
	if tpl.DiskSizeMB > 0 {
		s.DiskMiB = tpl.DiskSizeMB
	}
	for _, l := range []struct {
		name     string
		val, max int
	}{{"cpuCount", s.VCPUs, o.cfg.MaxVCPUs}, {"memoryMB", s.MemoryMiB, o.cfg.MaxMemoryMiB}, {"diskSizeMB", s.DiskMiB, o.cfg.MaxDiskMiB}} {
		if l.max > 0 && l.val > l.max {
			return s, fmt.Errorf("template %s: %s %d exceeds the server maximum %d: %w",
				tpl.Name, l.name, l.val, l.max, errdefs.ErrInvalidArgument)
		}
	}
	return s, nil
}

// Get returns one of team's live sandboxes; ErrNotFound when it is unknown,
// killed, or another team's.
func (o *Orchestrator) Get(ctx context.Context, team, id string) (store.Sandbox, error) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	e, ok := o.live[id]
	if !ok || !e.ownedBy(team) {
		return store.Sandbox{}, errNotFound(id)
	}
	return e.sb, nil
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
var errNoTeam = fmt.Errorf("orchestrator: no team given: %w", errdefs.ErrInvalidArgument)

// Route is where a sandbox's traffic goes right now (the proxy's view).
type Route struct {
	Addr       netip.Addr
	Token      string // envd access token ("" = none)
	State      string
	AutoResume bool
	Gen        uint64 // bumped by every resume: connections from before are stale
	// TrafficToken, when set, must be sent as e2b-traffic-access-token to
	// reach the sandbox's ports other than envd's.
	TrafficToken string
}

// Lookup is the proxy's cheap route to a live sandbox; ok is false for
// unknown sandboxes.
func (o *Orchestrator) Lookup(id string) (Route, bool) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	e, found := o.live[id]
	if !found || e.gone {
		return Route{}, false
	}
	return Route{Addr: e.addr, Token: e.sb.EnvdAccessToken, State: e.sb.State, AutoResume: e.sb.AutoResume, Gen: e.gen,
		TrafficToken: e.sb.Network.TrafficAccessToken}, true
}

func errNotFound(id string) error {
	return fmt.Errorf("Sandbox \"%s\" doesn't exist or you don't have access to it: %w", id, errdefs.ErrNotFound)
}

// ownedBy reports whether team owns e. Caller holds Orchestrator.mu; a
// team is never empty, so "" owns nothing.
func (e *entry) ownedBy(team string) bool {
	return team != "" && e.sb.Team == team
}

// entryFor returns team's live entry id with its op lock held; the caller
// unlocks. Every team-scoped operation on one sandbox starts here: another
// team's sandbox is not found, with the same error as an unknown ID.
func (o *Orchestrator) entryFor(team, id string) (*entry, error) {
	o.mu.RLock()
	e, ok := o.live[id]
	ok = ok && e.ownedBy(team)
	o.mu.RUnlock()
	if !ok {
		return nil, errNotFound(id)
	}
	return o.lock(e, id)
}

// anyEntry is entryFor for callers not acting for a team: the proxy's
// auto-resume, which is authorised by the sandbox's envd access token.
func (o *Orchestrator) anyEntry(id string) (*entry, error) {
	o.mu.RLock()
	e, ok := o.live[id]
	o.mu.RUnlock()
	if !ok {
		return nil, errNotFound(id)
	}
	return o.lock(e, id)
}

// lock takes e's op lock and checks that e was not removed meanwhile.
func (o *Orchestrator) lock(e *entry, id string) (*entry, error) {
	e.op.Lock()
	o.mu.RLock()
	gone := e.gone
	o.mu.RUnlock()
	if gone {
		e.op.Unlock()
		return nil, errNotFound(id)
	}
	return e, nil
}

// snapshot reads e's record under mu.
func (o *Orchestrator) snapshot(e *entry) store.Sandbox {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return e.sb
}

// commit persists sb and mirrors it in memory. Caller holds e.op.
func (o *Orchestrator) commit(ctx context.Context, e *entry, sb store.Sandbox) error {
	if err := o.db.UpdateSandbox(context.WithoutCancel(ctx), sb); err != nil {
		return err
	}
	o.mu.Lock()
	e.sb = sb
	o.mu.Unlock()
	return nil
}

const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return string(b)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// admit asks the admission controller for a slot for op; without one every
// operation is admitted at once.
func (o *Orchestrator) admit(ctx context.Context, op string, need admission.Need) (release func(), err error) {
	if o.cfg.Admission == nil {
		return func() {}, nil
	}
	return o.cfg.Admission.Admit(ctx, op, need)
}

// Reserved is what the live sandboxes reserve on the host: the memory of
// running ones (a paused microVM holds none) and the disk of all, plus the
// warm pools' members.
func (o *Orchestrator) Reserved() admission.Need {
	n := o.poolReserved()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range o.live {
		if e.gone {
			continue
		}
		if e.sb.State != store.StatePaused {
			n.MemoryMiB += e.sb.MemoryMB
		}
		n.DiskMiB += e.sb.DiskSizeMB
	}
	return n
}
