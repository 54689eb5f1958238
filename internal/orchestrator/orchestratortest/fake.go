// Package orchestratortest provides a fake runtime and an in-process envd
// stub so that the orchestrator, the REST server and the app can be tested
// without root, containers or VMs.
package orchestratortest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
)

var (
	_ runtime.Runtime           = (*Runtime)(nil)
	_ runtime.Snapshotter       = (*Runtime)(nil)
	_ orchestrator.EgressSetter = (*Runtime)(nil)
	_ runtime.Prelauncher       = (*Runtime)(nil)
	_ runtime.FilesystemPauser  = (*Runtime)(nil)
)

// Runtime is a fake backend: sandboxes are map entries whose "envd" is one
// shared httptest server on 127.0.0.1. Function fields inject failures.
type Runtime struct {
	Envd     *httptest.Server
	EnvdPort int

	CreateF func(spec runtime.Spec) error // non-nil error fails Create
	PauseF  func(id string) error
	// ResumeF fails a resume: with ran the sandbox runs again anyway
	// (an unhealthy resume), else it stays paused.
	ResumeF func(id string) (ran bool, err error)
	// RecoverErr is returned by Recover together with its handles.
	RecoverErr error
	// EgressF fails SetEgress when it returns an error.
	EgressF func(id string, e netpolicy.Egress) error
	// LogDir, when set, holds each sandbox's log as <id>.log
	// (runtime.LogSource).
	LogDir string

	mu        sync.Mutex
	slots     []string          // IDs Prelaunched hands out; guarded by mu
	sandbox   map[string]string // id → state ("running", "paused"); guarded by mu
	snaps     map[string]string // snapshot ID → the envd token inside it; guarded by mu
	tokens    map[string]string // sandbox ID → the token its "envd" has
	initCount map[string]int
	inits     map[string]state.Init
	killed    []string
	healthOK  bool
	initCode  int
	disk      [2]uint64 // used, total served by /metrics; zero: 404
	diskToken string    // X-Access-Token of the last /metrics call
	diskCalls int       // /metrics calls so far
	egress    map[string]netpolicy.Egress
	egressN   map[string]int
	ends      map[string]chan struct{} // closed when the sandbox's "process" ends; guarded by mu
	bg        map[string]bool          // sandboxes created with Spec.Background and not foregrounded
}

// AddSlot makes Prelaunched hand out id once (a sandbox made ahead).
func (r *Runtime) AddSlot(id string) { r.mu.Lock(); r.slots = append(r.slots, id); r.mu.Unlock() }

// Prelaunched implements runtime.Prelauncher with the IDs of AddSlot.
func (r *Runtime) Prelaunched(spec runtime.Spec) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.slots) == 0 || spec.Snapshot != "" || len(spec.Volumes) > 0 {
		return "", false
	}
	id := r.slots[0]
	r.slots = r.slots[1:]
	return id, true
}

// SetEgress records the policy as netpolicy.Manager.SetEgress would apply it.
func (r *Runtime) SetEgress(ctx context.Context, id string, e netpolicy.Egress) error {
	if r.EgressF != nil {
		if err := r.EgressF(id, e); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.egress == nil {
		r.egress, r.egressN = map[string]netpolicy.Egress{}, map[string]int{}
	}
	r.egress[id] = e
	r.egressN[id]++
	return nil
}

// Egress is the policy last set for id and how many times one was set.
func (r *Runtime) Egress(id string) (netpolicy.Egress, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.egress[id], r.egressN[id]
}

// NewRuntime starts the envd stub; it is closed when the test ends.
func NewRuntime(t testing.TB) *Runtime {
	t.Helper()
	r := &Runtime{sandbox: map[string]string{}, inits: map[string]state.Init{}, tokens: map[string]string{},
		snaps: map[string]string{}, initCount: map[string]int{}, healthOK: true, initCode: http.StatusNoContent,
		ends: map[string]chan struct{}{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		r.mu.Lock()
		ok := r.healthOK
		r.mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /init", func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		ok := r.healthOK
		r.mu.Unlock()
		if !ok { // an envd still starting: the connection ends without an answer
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
				return
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var in state.Init
		if err := json.NewDecoder(req.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		id := in.Internal["E2B_SANDBOX_ID"]
		r.mu.Lock()
		defer r.mu.Unlock()
		// Like envd: once it has a token, /init must present it.
		if cur := r.tokens[id]; cur != "" && req.Header.Get("X-Access-Token") != cur {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		r.inits[id] = in
		r.initCount[id]++
		if in.AccessToken != nil && r.initCode < 300 {
			r.tokens[id] = *in.AccessToken
		}
		if in.EgressCA != "" && r.initCode < 300 { // like envd: it installed the CA
			w.Header().Set(state.EgressCAHeader, state.EgressCAInstalled)
		}
		w.WriteHeader(r.initCode)
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.diskToken = req.Header.Get("X-Access-Token")
		r.diskCalls++
		if r.disk[1] == 0 {
			http.NotFound(w, req)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]uint64{"disk_used": r.disk[0], "disk_total": r.disk[1]})
	})
	r.Envd = httptest.NewServer(mux)
	t.Cleanup(r.Envd.Close)
	_, port, _ := net.SplitHostPort(r.Envd.Listener.Addr().String())
	r.EnvdPort, _ = strconv.Atoi(port)
	return r
}

// SetEnvdDisk makes envd's /metrics report these disk figures (total 0:
// /metrics answers 404, like an envd without it).
func (r *Runtime) SetEnvdDisk(used, total uint64) {
	r.mu.Lock()
	r.disk = [2]uint64{used, total}
	r.mu.Unlock()
}

// MetricsToken is the X-Access-Token the last /metrics call presented.
func (r *Runtime) MetricsToken() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.diskToken
}

// MetricsCalls is how many times envd's /metrics was called.
func (r *Runtime) MetricsCalls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.diskCalls
}

// SetHealthy makes /health answer 204 (true) or 503 (false); while false,
// /init connections end without an answer, as while envd starts.
func (r *Runtime) SetHealthy(ok bool) { r.mu.Lock(); r.healthOK = ok; r.mu.Unlock() }

// SetInitStatus sets the status /init answers.
func (r *Runtime) SetInitStatus(code int) { r.mu.Lock(); r.initCode = code; r.mu.Unlock() }

// Init returns the /init body envd received for id.
func (r *Runtime) Init(id string) (state.Init, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	in, ok := r.inits[id]
	return in, ok
}

// State returns the fake sandbox's state ("" when it does not exist).
func (r *Runtime) State(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sandbox[id]
}

// Killed lists every id Kill was called with.
func (r *Runtime) Killed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.killed...)
}

// Count is the number of existing fake sandboxes.
func (r *Runtime) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sandbox)
}

func (r *Runtime) Name() string { return "fake" }

// LogFiles implements runtime.LogSource (LogDir).
func (r *Runtime) LogFiles(id string) []string {
	if r.LogDir == "" {
		return nil
	}
	return []string{filepath.Join(r.LogDir, id+".log")}
}

func (r *Runtime) Create(ctx context.Context, spec runtime.Spec) (*runtime.Handle, error) {
	if r.CreateF != nil {
		if err := r.CreateF(spec); err != nil {
			return nil, err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if spec.Snapshot != "" {
		tok, ok := r.snaps[spec.Snapshot]
		if !ok {
			return nil, fmt.Errorf("fake snapshot %s: %w", spec.Snapshot, errdefs.ErrNotFound)
		}
		r.tokens[spec.ID] = tok // the clone's envd still has the source's token
	}
	r.sandbox[spec.ID] = "running"
	r.ends[spec.ID] = make(chan struct{})
	if spec.Background {
		if r.bg == nil {
			r.bg = map[string]bool{}
		}
		r.bg[spec.ID] = true
	}
	return &runtime.Handle{ID: spec.ID, Runtime: "fake", Addr: netip.MustParseAddr("127.0.0.1")}, nil
}

// Foreground implements runtime.Foregrounder.
func (r *Runtime) Foreground(ctx context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.bg, id)
	return nil
}

// Background reports whether id was created in the background and not
// foregrounded since.
func (r *Runtime) Background(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bg[id]
}

func (r *Runtime) Kill(ctx context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.killed = append(r.killed, id)
	delete(r.sandbox, id)
	delete(r.egress, id)
	r.endLocked(id)
	return nil
}

// Crash ends a sandbox behind the orchestrator's back, as a crashed VMM or
// an OOM-killed init would: Wait returns, the runtime forgets it.
func (r *Runtime) Crash(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.sandbox, id)
	r.endLocked(id)
}

func (r *Runtime) endLocked(id string) {
	if ch, ok := r.ends[id]; ok {
		close(ch)
		delete(r.ends, id)
	}
}

// Wait implements runtime.Runtime: it returns when the sandbox is killed
// or crashes.
func (r *Runtime) Wait(ctx context.Context, id string) (runtime.ExitStatus, error) {
	r.mu.Lock()
	ch, ok := r.ends[id]
	r.mu.Unlock()
	if !ok {
		return runtime.ExitStatus{}, fmt.Errorf("fake sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	select {
	case <-ch:
		return runtime.ExitStatus{Code: -1, Signal: 9}, nil
	case <-ctx.Done():
		return runtime.ExitStatus{}, ctx.Err()
	}
}

func (r *Runtime) Pause(ctx context.Context, id string) error {
	if r.PauseF != nil {
		if err := r.PauseF(id); err != nil {
			return err
		}
	}
	return r.transition(id, "running", "paused")
}

// PauseFilesystem implements runtime.FilesystemPauser: the state becomes
// "paused-fs" and its "process" ends (PauseF fails it too).
func (r *Runtime) PauseFilesystem(ctx context.Context, id string) error {
	if r.PauseF != nil {
		if err := r.PauseF(id); err != nil {
			return err
		}
	}
	if err := r.transition(id, "running", "paused-fs"); err != nil {
		return err
	}
	r.mu.Lock()
	r.endLocked(id) // its "process" ends
	r.mu.Unlock()
	return nil
}

func (r *Runtime) Resume(ctx context.Context, id string) (*runtime.Handle, error) {
	var ferr error
	if r.ResumeF != nil {
		ran, err := r.ResumeF(id)
		if err != nil && !ran {
			return nil, err
		}
		ferr = err
	}
	if err := r.transition(id, "paused-fs", "running"); err == nil {
		r.mu.Lock()
		r.ends[id] = make(chan struct{}) // a new "process"
		r.mu.Unlock()
	} else if err := r.transition(id, "paused", "running"); err != nil {
		return nil, err
	}
	return &runtime.Handle{ID: id, Runtime: "fake", Addr: netip.MustParseAddr("127.0.0.1")}, ferr
}

// MountsVolumes implements runtime.VolumeMounter: the fake takes
// Spec.Volumes (and mounts nothing).
func (r *Runtime) MountsVolumes() bool { return true }

// Features: the fake pretends to pause to disk and to take snapshots.
func (r *Runtime) Features() runtime.Features {
	return runtime.Features{PauseToDisk: true}
}

// Snapshot records snapID for a running sandbox.
func (r *Runtime) Snapshot(ctx context.Context, id, snapID string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sandbox[id] != "running" {
		return fmt.Errorf("fake sandbox %s is %q: %w", id, r.sandbox[id], errdefs.ErrFailedPrecondition)
	}
	r.snaps[snapID] = r.tokens[id]
	return nil
}

// DeleteSnapshot forgets snapID.
func (r *Runtime) DeleteSnapshot(ctx context.Context, snapID string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.snaps, snapID)
	return nil
}

// HasSnapshot reports whether snapID exists.
func (r *Runtime) HasSnapshot(snapID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.snaps[snapID]
	return ok
}

// InitCount is how many /init calls envd of id accepted.
func (r *Runtime) InitCount(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.initCount[id]
}

func (r *Runtime) transition(id, from, to string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sandbox[id] != from {
		return fmt.Errorf("fake sandbox %s is %q, not %s: %w", id, r.sandbox[id], from, errdefs.ErrFailedPrecondition)
	}
	r.sandbox[id] = to
	return nil
}

func (r *Runtime) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.sandbox[id]; !ok {
		return runtime.Stats{}, fmt.Errorf("fake sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	now := time.Now()
	return runtime.Stats{CPUUsageNs: uint64(now.UnixNano() / 10), MemoryBytes: 64 << 20, MemoryLimit: 512 << 20, Pids: 3, Time: now}, nil
}

// Recover keeps the live ids it knows and drops the rest.
func (r *Runtime) Recover(ctx context.Context, live []string) ([]*runtime.Handle, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	keep := map[string]bool{}
	var out []*runtime.Handle
	for _, id := range live {
		if _, ok := r.sandbox[id]; ok {
			keep[id] = true
			if r.ends[id] == nil {
				r.ends[id] = make(chan struct{})
			}
			out = append(out, &runtime.Handle{ID: id, Runtime: "fake", Addr: netip.MustParseAddr("127.0.0.1"),
				Paused: strings.HasPrefix(r.sandbox[id], "paused")})
		}
	}
	for id := range r.sandbox {
		if !keep[id] {
			delete(r.sandbox, id)
			r.endLocked(id)
		}
	}
	return out, r.RecoverErr
}

// Env is a ready orchestrator over a real store with one template "base".
type Env struct {
	Orch    *orchestrator.Orchestrator
	DB      *store.DB
	Runtime *Runtime
	DBPath  string
}

// New builds an Env; cfg's Store, Runtime and EnvdPort are filled in.
func New(t testing.TB, cfg orchestrator.Config) *Env {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "moat.db")
	db, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.UpsertTemplate(ctx, store.Template{ID: "tplbase", Name: "base", RootfsDir: "/nonexistent",
		CPUCount: 2, MemoryMB: 512, DiskSizeMB: 1024, EnvdVersion: state.Version}); err != nil {
		t.Fatal(err)
	}
	rt := NewRuntime(t)
	cfg.Store, cfg.Runtime, cfg.EnvdPort = db, rt, rt.EnvdPort
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 2 * time.Second
	}
	o, err := orchestrator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &Env{Orch: o, DB: db, Runtime: rt, DBPath: path}
}
