package build

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/oci"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/template"
)

// Config wires a Manager; DB, DataDir and EnvdPath are required.
type Config struct {
	DB       *store.DB
	DataDir  string // templates go to <DataDir>/templates/<alias>
	EnvdPath string // the envd binary installed into every template
	Logger   *slog.Logger
	// Timeout bounds one build (default 30 minutes).
	Timeout time.Duration
	// Runner runs RUN steps; nil refuses them with NoRunner (an error of
	// kind errdefs.ErrNotImplemented saying why).
	Runner   Runner
	NoRunner error
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
	cfg Config
	log *slog.Logger

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
	if n, err := cfg.DB.FailUnfinishedBuilds(ctx, "the server restarted during the build"); err != nil {
		return nil, err
	} else if n > 0 {
		cfg.Logger.Warn("template builds interrupted by a restart marked failed", "builds", n)
	}
	bctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	return &Manager{cfg: cfg, log: cfg.Logger, logs: map[string][]LogEntry{}, ctx: bctx, stop: stop}, nil
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
// request).
func (m *Manager) Start(ctx context.Context, b store.Build, spec Spec) error {
	plan, err := Compile(spec)
	if err != nil {
		return err
	}
	if (plan.Config.StartCmd != "" || plan.Config.ReadyCmd != "") && m.cfg.Runner == nil {
		return fmt.Errorf("startCmd and readyCmd (setStartCmd/setReadyCmd) need the container runtime "+
			"(a microVM would have to run them before its snapshot; not supported yet): %w", errdefs.ErrNotImplemented)
	}
	if len(plan.Runs) > 0 && m.cfg.Runner == nil {
		why := m.cfg.NoRunner
		if why == nil {
			why = fmt.Errorf("RUN and COPY steps are not supported by this server: %w", errdefs.ErrNotImplemented)
		}
		kind := "RUN"
		if plan.Runs[0].Copy != nil {
			kind = "COPY"
		}
		return fmt.Errorf("step %d (%s): %w", plan.Runs[0].Index, kind, why)
	}
	if m.cfg.EnvdPath == "" {
		return fmt.Errorf("template builds need envd: start the server with envd available: %w", errdefs.ErrUnavailable)
	}
	if plan.FromTemplate != "" {
		// Resolve now so a wrong name is the request's 404/400 rather
		// than a failed build.
		if _, err := m.cfg.DB.GetTeamTemplate(ctx, b.Team, plan.FromTemplate); err != nil {
			if errdefs.IsNotFound(err) {
				return fmt.Errorf("fromTemplate: template '%s' not found: %w", plan.FromTemplate, errdefs.ErrInvalidArgument)
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
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.run(b, plan)
	}()
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
	step, err := m.execute(ctx, b, plan)
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
	m.logf(b.ID, "info", "", "build finished in %s", time.Since(start).Round(time.Millisecond))
	m.log.Info("template built", "template", b.Name, "build", b.ID, "duration", time.Since(start))
}

// errorMessage is the user-facing text of a build error: the chain
// without the errdefs kind appended by %w, or a generic text for an
// unclassified (internal) error, whose text may name host paths.
func errorMessage(err error) string {
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

// execute builds the rootfs and registers the template; step names the
// failing step as the SDK counts them: "base", "1".."n" for the steps,
// "finalize" for the registration.
func (m *Manager) execute(ctx context.Context, b store.Build, plan Plan) (step string, err error) {
	step = "base" // until a step's own check fails
	opts := template.Options{DataDir: m.cfg.DataDir, EnvdPath: m.cfg.EnvdPath, Logger: m.log, Force: plan.Force,
		Out: &logWriter{m: m, build: b.ID}}
	// RUN steps run in a build sandbox over the new rootfs, and the steps'
	// user and workdir are checked in it, before it replaces the
	// template's: a failing step leaves nothing behind.
	var base store.TemplateConfig
	opts.Prepare = func(rootfs string, img *oci.Config) error {
		if img != nil {
			base = imageConfig(*img)
		}
		if len(plan.Runs) > 0 {
			if err := m.runSteps(ctx, b, rootfs, base, plan.Runs); err != nil {
				var ee *ExitError
				if errors.As(err, &ee) {
					step = fmt.Sprint(ee.Index)
				} else {
					step = fmt.Sprint(plan.Runs[0].Index)
				}
				return err
			}
		}
		if err := checkConfig(rootfs, plan.Config); err != nil {
			step = lastStep(plan.Steps)
			return err
		}
		return nil
	}
	if len(plan.Runs) > 0 {
		opts.Force = true // a fresh rootfs: never run commands over the template in use
	}
	if plan.FromTemplate != "" {
		m.logf(b.ID, "info", "base", "FROM template %s", plan.FromTemplate)
	} else {
		m.logf(b.ID, "info", "base", "FROM image %s", plan.FromImage)
	}
	m.logSteps(b.ID, plan.Steps)
	var res template.Result
	switch {
	case plan.FromTemplate != "":
		src, err := m.cfg.DB.GetTeamTemplate(ctx, b.Team, plan.FromTemplate)
		if err != nil {
			return "base", fmt.Errorf("fromTemplate %s: %w", plan.FromTemplate, err)
		}
		if base, err = m.cfg.DB.TemplateConfigOf(ctx, src.ID); err != nil {
			return "base", err
		}
		if res, err = template.BuildFromTemplate(ctx, b.Name, src.RootfsDir, opts); err != nil {
			if step != "base" { // a step's own error names the step
				return step, err
			}
			return step, fmt.Errorf("fromTemplate %s: %w", plan.FromTemplate, err)
		}
	default:
		ir, err := template.BuildFromImage(ctx, b.Name,
			template.ImageSource{Ref: plan.FromImage, Credentials: plan.Registry}, opts)
		if err != nil {
			if step != "base" {
				return step, err
			}
			return step, fmt.Errorf("fromImage %s: %w", plan.FromImage, err)
		}
		res, base = ir.Result, imageConfig(ir.Image.Config)
	}
	cfg := over(base, plan.Config)
	t := store.Template{RootfsDir: res.RootfsDir, CPUCount: b.CPUCount, MemoryMB: b.MemoryMB, EnvdVersion: state.Version}
	if err := m.cfg.DB.FinishBuild(ctx, b, t, cfg); err != nil {
		return "finalize", err
	}
	return "", nil
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

// logSteps logs the steps that were applied.
func (m *Manager) logSteps(buildID string, steps []Step) {
	for i, st := range steps {
		m.logf(buildID, "info", fmt.Sprint(i+1), "[%d/%d] %s %s", i+1, len(steps), st.Type, strings.Join(st.Args, " "))
	}
}

// runSteps runs the RUN and COPY steps in a build sandbox over rootfs,
// logging each step and its output; the workdirs they use are made first
// (owned by root, as Docker's WORKDIR) and COPY archives are staged in
// the rootfs for the sandbox to unpack.
func (m *Manager) runSteps(ctx context.Context, b store.Build, rootfs string, base store.TemplateConfig, runs []RunStep) error {
	execs := make([]Exec, len(runs))
	defer func() {
		if err := unstage(rootfs); err != nil {
			m.log.Warn("remove staged COPY archives", "rootfs", rootfs, "err", err)
		}
	}()
	for i, r := range runs {
		e := resolve(r, base)
		if err := checkConfig(rootfs, store.TemplateConfig{Workdir: e.Workdir}); err != nil {
			return fmt.Errorf("step %d: %w", r.Index, err)
		}
		if c := r.Copy; c != nil {
			gz, err := stageCopy(m.cfg.DataDir, b.Team, rootfs, c)
			if err != nil {
				return fmt.Errorf("step %d (COPY): %w", r.Index, err)
			}
			e = Exec{Index: r.Index, Kind: "COPY", Label: fmt.Sprintf("COPY %s %s", c.Src, c.Dest),
				Cmd: copyScript(c, c.Dest, e.User, gz), User: "root", Workdir: e.Workdir, Env: e.Env}
		}
		execs[i] = e
	}
	m.logf(b.ID, "info", "", "starting a build sandbox for %d RUN/COPY step(s)", len(runs))
	last := 0
	return m.cfg.Runner.Run(ctx, rootfs, execs, func(e Exec, stream, line string) {
		if e.Index != last {
			last = e.Index
			m.logf(b.ID, "info", fmt.Sprint(e.Index), "%s (as %s)", e.Label, e.User)
		}
		level := "info"
		if stream == "stderr" {
			level = "warn"
		}
		m.logf(b.ID, level, fmt.Sprint(e.Index), "%s", line)
	})
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
			return fmt.Errorf("USER %s: no such user in the template: %w", cfg.User, errdefs.ErrInvalidArgument)
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

// logWriter turns the template builders' progress output into log lines.
type logWriter struct {
	m     *Manager
	build string
	buf   []byte
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexAny(string(w.buf), "\r\n")
		if i < 0 {
			break
		}
		if line := strings.TrimSpace(string(w.buf[:i])); line != "" {
			w.m.logf(w.build, "info", "", "%s", line)
		}
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}
