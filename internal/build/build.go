package build

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/build/layercache"
	"github.com/moatsh/moat/internal/cluster/artefact"
	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/oci"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/template"
)

// Config wires a Manager; DB, DataDir and EnvdPath are required.
type Config struct {
	DB       Store
	DataDir  string // templates go to <DataDir>/templates/<alias>
	EnvdPath string // the envd binary installed into every template
	Logger   *slog.Logger
	// Timeout bounds one build (default 30 minutes).
	Timeout time.Duration
	// NodeID, in a cluster, is this server's node: a finished template
	// records it with its tree's digest (package cluster/artefact), so
	// that other nodes copy the tree from here and check it. "" = a
	// server alone.
	NodeID string
	// Runner runs RUN steps; nil refuses them with NoRunner (an error of
	// kind errdefs.ErrNotImplemented saying why).
	Runner   Runner
	NoRunner error
	// LayerMaxAge, MaxLayers and LayerMinFree bound the layer cache (see
	// GC): a layer no template was built from goes when unused for
	// LayerMaxAge (default 7 days), and the least recently used such
	// layers go beyond MaxLayers of them (default 100) and while the
	// filesystem has less than LayerMinFree of its space free (default
	// 0.1; layers share unchanged files, so a count says little of size).
	LayerMaxAge  time.Duration
	MaxLayers    int
	LayerMinFree float64
}

// LogEntry is one line of a build's log (E2B's BuildLogEntry).
type LogEntry struct {
	Time    time.Time
	Level   string // debug, info, warn, error
	Message string
	Step    string // the step's index as the SDK counts ("" for none)
}

// Manager runs builds in the background. It is safe for concurrent use.
type Manager struct {
	cfg   Config
	log   *slog.Logger
	cache layercache.Store

	mu   sync.Mutex
	logs map[string][]LogEntry // guarded by mu; by build ID, of builds run by this process
	wg   sync.WaitGroup
	ctx  context.Context
	stop context.CancelFunc
}

// maxLogEntries bounds one build's log in memory.
const maxLogEntries = 10000

// logRetention is how long a finished build's log stays in memory.
const logRetention = time.Hour

// New returns a Manager. Builds left waiting or building by an earlier
// process are marked failed: nothing runs them any more. Close stops
// running builds.
func New(ctx context.Context, cfg Config) (*Manager, error) {
	if cfg.DB == nil || cfg.DataDir == "" {
		return nil, errors.New("build: DB and DataDir are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Minute
	}
	if cfg.LayerMaxAge <= 0 {
		cfg.LayerMaxAge = 7 * 24 * time.Hour
	}
	if cfg.MaxLayers <= 0 {
		cfg.MaxLayers = 100
	}
	if cfg.LayerMinFree <= 0 {
		cfg.LayerMinFree = 0.1
	}
	if n, err := cfg.DB.FailUnfinishedBuilds(ctx, "the server restarted during the build"); err != nil {
		return nil, err
	} else if n > 0 {
		cfg.Logger.Warn("template builds interrupted by a restart marked failed", "builds", n)
	}
	bctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	m := &Manager{cfg: cfg, log: cfg.Logger, cache: layercache.New(cfg.DataDir), logs: map[string][]LogEntry{}, ctx: bctx, stop: stop}
	m.wg.Go(m.collect) // what earlier processes left
	return m, nil
}

// Close cancels running builds and waits for them.
func (m *Manager) Close() {
	m.stop()
	m.wg.Wait()
}

// Start validates spec (see Compile) and runs build b in the background.
// b must be waiting; a build that was already started is
// errdefs.ErrFailedPrecondition. Errors of Compile come back before
// anything starts, and the build stays waiting (the SDK can send a fixed
// request); so does the refusal of RUN and COPY without a Runner.
// startCmd and readyCmd need no Runner: they are stored with the template
// and run by the orchestrator at each create, on any runtime.
func (m *Manager) Start(ctx context.Context, b store.Build, spec Spec) error {
	plan, err := Compile(spec)
	if err != nil {
		return err
	}
	if len(plan.Runs) > 0 && m.cfg.Runner == nil {
		why := m.cfg.NoRunner
		if why == nil {
			why = errdefs.Publicf(errdefs.ErrNotImplemented, "RUN and COPY steps are not supported by this server")
		}
		kind := "RUN"
		if plan.Runs[0].Copy != nil {
			kind = "COPY"
		}
		return errdefs.PublicWrap(why, "step %d (%s)", plan.Runs[0].Index, kind)
	}
	if m.cfg.EnvdPath == "" {
		return errdefs.Publicf(errdefs.ErrUnavailable, "template builds need envd: start the server with envd available")
	}
	switch {
	case plan.FromImage != "" && plan.Registry == nil:
		name, err := m.localFrom(ctx, b.Team, plan.FromImage)
		if err != nil {
			return err
		}
		if name != "" { // found, so nothing more to check
			m.log.Info("fromImage names a template: building from it", "build", b.ID, "image", plan.FromImage, "template", name)
			plan.FromImage, plan.FromTemplate = "", name
		}
	case plan.FromTemplate != "":
		// Resolve now so a wrong name is the request's 404/400 rather
		// than a failed build.
		if _, err := m.cfg.DB.GetTeamTemplate(ctx, b.Team, plan.FromTemplate); err != nil {
			if errdefs.IsNotFound(err) {
				return errdefs.Publicf(errdefs.ErrInvalidArgument, "fromTemplate: template '%s' not found", plan.FromTemplate)
			}
			return err
		}
	}
	if err := m.cfg.DB.StartBuild(ctx, b.ID); err != nil {
		return err
	}
	m.mu.Lock()
	m.logs[b.ID] = nil
	m.mu.Unlock()
	m.wg.Go(func() {
		m.run(b, plan)
		m.collect()
	})
	return nil
}

// Logs returns the build's log entries from offset on; nil for a build
// this process did not run (its log is gone with the process that did)
// or that finished more than an hour ago.
func (m *Manager) Logs(buildID string, offset int) []LogEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.logs[buildID]
	if offset < 0 || offset >= len(l) {
		return nil
	}
	return append([]LogEntry(nil), l[offset:]...)
}

func (m *Manager) logf(buildID, level, step, format string, args ...any) {
	e := LogEntry{Time: time.Now().UTC(), Level: level, Message: fmt.Sprintf(format, args...), Step: step}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.logs[buildID]) < maxLogEntries {
		m.logs[buildID] = append(m.logs[buildID], e)
	}
}

// run executes plan for b and records the outcome; a failure registers
// nothing.
func (m *Manager) run(b store.Build, plan Plan) {
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.Timeout)
	defer cancel()
	defer time.AfterFunc(logRetention, func() {
		m.mu.Lock()
		delete(m.logs, b.ID)
		m.mu.Unlock()
	})
	start := time.Now()
	step, err := m.execute(ctx, b, plan, start)
	// The outcome is recorded even when the build's context ended.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer rcancel()
	if err != nil {
		msg := errorMessage(err)
		m.logf(b.ID, "error", step, "build failed: %s", msg)
		if ferr := m.cfg.DB.FailBuild(rctx, b.ID, msg, step); ferr != nil {
			m.log.Error("record failed template build", "build", b.ID, "err", ferr)
		}
		m.log.Warn("template build failed", "template", b.Name, "build", b.ID, "step", step, "err", err)
		return
	}
	m.log.Info("template built", "template", b.Name, "build", b.ID, "duration", time.Since(start))
}

// errorMessage is the user-facing text of a build error: its public text
// (errdefs.Public), else the chain without the errdefs kind appended by %w
// (registry and image errors name what the user asked for), or a generic
// text for an unclassified (internal) error, whose text may name host paths.
func errorMessage(err error) string {
	if msg, ok := errdefs.PublicMessage(err); ok {
		return msg
	}
	for _, k := range []error{errdefs.ErrInvalidArgument, errdefs.ErrNotFound, errdefs.ErrNotImplemented,
		errdefs.ErrFailedPrecondition, errdefs.ErrAlreadyExists, errdefs.ErrUnavailable,
		errdefs.ErrUnauthenticated, errdefs.ErrPermissionDenied, errdefs.ErrResourceExhausted} {
		if errors.Is(err, k) {
			return strings.TrimSuffix(err.Error(), ": "+k.Error())
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "the build timed out"
	}
	if errors.Is(err, context.Canceled) {
		return "the build was cancelled (server shutting down)"
	}
	return "internal error during the build (see the server log)"
}

// execute builds the rootfs from cached or new layers, installs it and
// registers the template; step names the failing step as the SDK counts
// them: "base", "1".."n" for the steps, "finalize" for the registration.
// Everything it makes outside the cache is in a work directory removed
// at the end; a failing step's tree never becomes a layer.
func (m *Manager) execute(ctx context.Context, b store.Build, plan Plan, start time.Time) (step string, err error) {
	envdSum, err := template.EnvdSHA256(m.cfg.EnvdPath)
	if err != nil {
		return "base", err
	}
	unlock, _, err := m.cache.Lock(false, true)
	if err != nil {
		return "base", err
	}
	defer unlock()
	work, err := m.cache.WorkDir()
	if err != nil {
		return "base", err
	}
	defer func() {
		if err := os.RemoveAll(work); err != nil {
			m.log.Error("remove build work dir", "dir", work, "err", err)
		}
	}()
	bs, err := m.baseLayer(ctx, b, plan, envdSum, work)
	if err != nil {
		return "base", err
	}
	last, keys, step, err := m.runChain(ctx, b, plan, bs, work)
	if err != nil {
		return step, err
	}
	rootfs, step, err := m.install(ctx, b, plan, last, bs, envdSum, work)
	if err != nil {
		return step, err
	}
	if err := layercache.WriteRefs(m.cfg.DataDir, b.Name, keys); err != nil {
		m.log.Warn("template layers not recorded: GC may remove them", "template", b.Name, "err", err)
	}
	cfg := over(bs.cfg, plan.Config)
	t := store.Template{RootfsDir: rootfs, CPUCount: b.CPUCount, MemoryMB: b.MemoryMB, EnvdVersion: state.Version}
	// The last line is logged before the build is ready: the SDK stops
	// polling the log then.
	m.logf(b.ID, "info", "", "build finished in %s", time.Since(start).Round(time.Millisecond))
	if m.cfg.NodeID != "" {
		if t.Digest, err = artefact.Digest(rootfs); err != nil {
			return "finalize", err
		}
		t.NodeID = m.cfg.NodeID
	}
	if err := m.cfg.DB.FinishBuild(ctx, b, t, cfg); err != nil {
		return "finalize", err
	}
	return "", nil
}

// install makes a hard-link copy of the last layer the template's rootfs
// (with the final WORKDIR made and USER checked) and returns its path.
// When the template's rootfs already is a copy of that layer (a fully
// cached rebuild) it stays as it is: the same tree, and a microVM
// snapshot made of it stays valid.
func (m *Manager) install(ctx context.Context, b store.Build, plan Plan, last layer, bs base,
	envdSum, work string) (rootfs, step string, err error) {
	key := layerStampPrefix + last.key + "@" + filepath.Base(last.dir)
	if !plan.Force && template.InstalledCacheKey(m.cfg.DataDir, b.Name) == key {
		m.logf(b.ID, "info", "", "the template's root filesystem is unchanged")
		return template.Layout{DataDir: m.cfg.DataDir}.RootfsDir(b.Name), "", nil
	}
	tree := filepath.Join(work, "rootfs")
	if err := layercache.LinkTree(ctx, last.dir, tree); err != nil {
		return "", "finalize", err
	}
	if err := checkConfig(tree, plan.Config); err != nil {
		return "", lastStep(plan.Steps), err
	}
	res, err := template.Install(b.Name, tree, template.InstallOptions{DataDir: m.cfg.DataDir, Logger: m.log,
		CacheKey: key, EnvdSHA256: envdSum, Image: bs.image})
	if err != nil {
		return "", "finalize", fmt.Errorf("template %s: %w", b.Name, err)
	}
	return res.RootfsDir, "", nil
}

// imageConfig takes an image's ENV and WORKDIR as the template's
// defaults; its USER is not taken (sandboxes run as the account the build
// added, as on E2B) and its ENTRYPOINT/CMD are not started.
func imageConfig(img oci.Config) store.TemplateConfig {
	var c store.TemplateConfig
	for _, kv := range img.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !envNameRE.MatchString(k) {
			continue
		}
		if c.Env == nil {
			c.Env = map[string]string{}
		}
		c.Env[k] = v
	}
	c.Workdir = img.WorkingDir
	return c
}

// checkConfig makes sure the rootfs has cfg's user and creates its workdir
// (owned by root, like Docker's WORKDIR) when missing. Both go through
// os.Root, so no symlink in the tree leads outside it.
func checkConfig(rootfs string, cfg store.TemplateConfig) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return fmt.Errorf("open rootfs: %w", err)
	}
	defer root.Close()
	if cfg.User != "" {
		b, err := root.ReadFile("etc/passwd")
		if err != nil {
			return fmt.Errorf("USER %s: read /etc/passwd: %w", cfg.User, err)
		}
		found := false
		for _, line := range strings.Split(string(b), "\n") {
			if name, _, _ := strings.Cut(line, ":"); name == cfg.User {
				found = true
				break
			}
		}
		if !found {
			return errdefs.Publicf(errdefs.ErrInvalidArgument, "USER %s: no such user in the template", cfg.User)
		}
	}
	if cfg.Workdir != "" && cfg.Workdir != "/" {
		if err := root.MkdirAll(strings.TrimPrefix(cfg.Workdir, "/"), 0o755); err != nil {
			return fmt.Errorf("WORKDIR %s: %w", cfg.Workdir, err)
		}
	}
	return nil
}

func lastStep(steps []Step) string {
	if len(steps) == 0 {
		return ""
	}
	return fmt.Sprint(len(steps))
}
