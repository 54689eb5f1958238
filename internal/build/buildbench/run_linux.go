package buildbench

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moatsh/moat/internal/bench"
	"github.com/moatsh/moat/internal/build"
	"github.com/moatsh/moat/internal/cgroups"
	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/oci/ocireg"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/template"
)

// benchScope names the bench's host objects apart from a server's (its
// cgroups, OCI state and ID ranges: runtime.Host.Scope); its network
// scope is its own too (start).
const benchScope = runtime.MaxScope - 1

// env is what the rounds share.
type env struct {
	cfg  Config
	db   *store.DB
	m    *build.Manager
	ref  string // the Debian image
	hash string // the COPY step's upload
}

// Run pushes DataDir's base rootfs to an in-process registry as a Debian
// image, then times N rounds of: a cold build (the request's force: every
// layer is rebuilt; the image's blobs stay cached), a fully cached
// rebuild and a rebuild whose last step changed. It needs root, the
// container runtime and the Debian mirror. A cached rebuild that does not
// reuse every layer is an error.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if cfg.N <= 0 {
		cfg.N = 3
	}
	if cfg.Package == "" {
		cfg.Package = "jq"
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	// Warnings go to stderr: a failed round's cause must be on record.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rootfs := template.Layout{DataDir: cfg.DataDir}.RootfsDir("base")
	reg, err := ocireg.Start("", "")
	if err != nil {
		return Report{}, err
	}
	defer reg.Close()
	if err := reg.PushRootfs("test/debian:12", rootfs, ocireg.DebianConfig); err != nil {
		return Report{}, fmt.Errorf("template build bench: %w (build the base template first)", err)
	}
	scratch, err := os.MkdirTemp(cfg.DataDir, "bench-template-build-")
	if err != nil {
		return Report{}, err
	}
	defer os.RemoveAll(scratch)
	e := &env{cfg: cfg, ref: reg.Ref("test/debian:12")}
	stop, err := e.start(ctx, scratch, log)
	if err != nil {
		return Report{}, fmt.Errorf("template build bench: %w", err)
	}
	defer stop()
	return e.rounds(ctx)
}

// start opens a store, a container runtime with a network scope of its
// own and a build Manager over scratch, and uploads the COPY step's files.
func (e *env) start(ctx context.Context, scratch string, log *slog.Logger) (stop func(), err error) {
	if e.db, err = store.Open(ctx, filepath.Join(scratch, "moat.db")); err != nil {
		return nil, err
	}
	np, err := netpolicy.New(log, netpolicy.WithScope("moatbt", "mt", netip.MustParsePrefix("10.235.0.0/16")))
	if err != nil {
		e.db.Close()
		return nil, err
	}
	newRuntime := e.cfg.NewRuntime
	if newRuntime == nil {
		newRuntime = func(ctx context.Context, cfg runtime.Config) (runtime.Runtime, error) {
			return runtime.New(ctx, "container", cfg)
		}
	}
	host := runtime.Host{Scope: benchScope}
	rt, err := newRuntime(ctx, runtime.Config{DataDir: scratch, Logger: log, Network: np, Host: host})
	if err != nil {
		np.Close()
		e.db.Close()
		return nil, err
	}
	stop = func() {
		if e.m != nil {
			e.m.Close()
		}
		if c, ok := rt.(io.Closer); ok {
			_ = c.Close()
		}
		_ = np.Close()
		_ = os.RemoveAll(host.ScopeStateDir())
		_ = cgroups.RemoveAll(host.ScopeCgroup())
		e.db.Close()
	}
	runner, err := build.NewSandboxRunner(rt, 0, log)
	if err == nil {
		var envd string
		if envd, err = template.FindEnvd(""); err == nil {
			e.m, err = build.New(ctx, build.Config{DB: e.db, DataDir: scratch, EnvdPath: envd, Logger: log, Runner: runner})
		}
	}
	if err == nil {
		e.hash, err = upload(scratch)
	}
	if err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// upload stores the COPY step's files (a small app directory) as the
// SDK's upload would.
func upload(dataDir string) (string, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	files := map[string]string{"app/main.py": "print('hello')\n", "app/config.json": `{"debug": false}` + "\n"}
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "app/", Mode: 0o755})
	for name, body := range files {
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body))})
		_, _ = io.WriteString(tw, body)
	}
	if err := errors.Join(tw.Close(), zw.Close()); err != nil {
		return "", err
	}
	sum := sha256.Sum256(buf.Bytes())
	hash := hex.EncodeToString(sum[:])
	p := build.FilesPath(dataDir, store.DefaultTeam, hash)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", err
	}
	return hash, os.WriteFile(p, buf.Bytes(), 0o600)
}

// steps are the template's steps; last is the last RUN's marker.
func (e *env) steps(last string) []build.Step {
	return []build.Step{
		{Type: "RUN", Args: []string{"apt-get update && DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes " +
			"apt-get install -y --no-install-recommends " + e.cfg.Package, "root"}},
		{Type: "COPY", Args: []string{"app", "/opt/app", "", ""}, FilesHash: e.hash},
		{Type: "WORKDIR", Args: []string{"/opt/app"}},
		{Type: "RUN", Args: []string{"(" + e.cfg.Package + " --version || true) > version.txt && echo " + last + " >> version.txt", "root"}},
	}
}

// rounds times the three kinds of build N times, alternating.
func (e *env) rounds(ctx context.Context) (Report, error) {
	r := Report{Cold: bench.Series{Name: "cold build (force: every layer rebuilt)"},
		Cached:      bench.Series{Name: "fully cached rebuild"},
		LastChanged: bench.Series{Name: "rebuild, last step changed"}}
	for i := 0; i < e.cfg.N; i++ {
		for _, k := range []struct {
			s      *bench.Series
			force  bool
			last   string
			cached int // CACHED steps the log must show
		}{{&r.Cold, true, "v0", 0}, {&r.Cached, false, "v0", 3}, {&r.LastChanged, false, fmt.Sprintf("v%d-%d", i+1, time.Now().UnixNano()), 2}} {
			d, err := e.build(ctx, build.Spec{FromImage: e.ref, Steps: e.steps(k.last), Force: k.force}, k.cached)
			if err != nil {
				return r, fmt.Errorf("template build bench: %s, round %d: %w", k.s.Name, i+1, err)
			}
			k.s.Samples = append(k.s.Samples, d)
			fmt.Fprintf(e.cfg.Progress, "round %d: %s: %v\n", i+1, k.s.Name, d.Round(time.Millisecond))
		}
	}
	if r.Ratio() >= Goal {
		r.Print(e.cfg.Progress)
		return r, fmt.Errorf("template build bench: a cached rebuild takes %.3f of a cold build (goal < %.2f)", r.Ratio(), Goal)
	}
	return r, nil
}

// build runs one build of the template and waits for it; its log must
// show wantCached steps as CACHED.
func (e *env) build(ctx context.Context, spec build.Spec, wantCached int) (time.Duration, error) {
	b, err := e.db.RequestBuild(ctx, store.DefaultTeam, "bench-tb", 0, 0)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := e.m.Start(ctx, b, spec); err != nil {
		return 0, err
	}
	for {
		got, err := e.db.GetBuild(ctx, store.DefaultTeam, b.TemplateID, b.ID)
		if err != nil {
			return 0, err
		}
		if got.Status == store.BuildError {
			return 0, fmt.Errorf("build failed at step %s: %s; its log:\n%s", got.ReasonStep, got.Reason, e.logTail(b.ID, 20))
		}
		if got.Status == store.BuildReady {
			break
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	d := time.Since(start)
	n := 0
	for _, l := range e.m.Logs(b.ID, 0) {
		if e.cfg.BuildLog != nil {
			fmt.Fprintln(e.cfg.BuildLog, logLine(l))
		}
		if strings.Contains(l.Message, "] CACHED ") {
			n++
		}
	}
	if n != wantCached {
		return 0, fmt.Errorf("%d steps were cached, want %d", n, wantCached)
	}
	return d, nil
}

// logTail is the last n lines of build id's log, for an error.
func (e *env) logTail(id string, n int) string {
	var b strings.Builder
	lines := e.m.Logs(id, 0)
	for _, l := range lines[max(len(lines)-n, 0):] {
		fmt.Fprintf(&b, "  %s\n", logLine(l))
	}
	return b.String()
}

// logLine is one build log entry as the bench prints it.
func logLine(l build.LogEntry) string {
	return fmt.Sprintf("%s %-5s %s %s", l.Time.Format("15:04:05.000"), l.Level, l.Step, l.Message)
}
