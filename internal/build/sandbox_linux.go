package build

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/moatsh/moat/api/envd/process/processconnect"
	"github.com/moatsh/moat/internal/build/upper"
	"github.com/moatsh/moat/internal/dialrace"
	"github.com/moatsh/moat/internal/envd/runcmd"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/hostfs"
	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/runtime"
)

// SandboxRunner runs RUN steps in a sandbox of the container runtime: the
// same user namespace, seccomp profile, cgroup limits and host-side
// network policy as every sandbox (created through runtime.Runtime, with
// internet access, never to the host or other sandboxes). The commands go
// through envd's process API, as the SDKs' commands.run do. Afterwards
// the sandbox is frozen and its writable layer (the overlay upper dir the
// runtime keeps in its SandboxDir(id)/disk/upper, owned
// by the sandbox's host ID range) is written into the rootfs being built.
type SandboxRunner struct {
	rt       hostLayerRuntime
	envdPort int
	log      *slog.Logger
	http     *http.Client

	VCPUs     int // build sandbox size (defaults 2 vCPUs, 2048 MiB, 10 GiB disk)
	MemoryMiB int
	DiskMiB   int
}

// hostLayerRuntime is a runtime whose sandboxes keep their writable
// layer where the host reads it (the container and gvisor backends).
type hostLayerRuntime interface {
	runtime.Runtime
	SandboxDir(id string) string
}

// NewSandboxRunner returns a Runner over rt, which must keep its
// sandboxes' writable layer where the host can read it (the container and
// gvisor runtimes; errdefs.ErrNotImplemented otherwise: a microVM's disk
// is not an overlay the host can read, that runtime hands out a container
// runtime for builds instead, see runtime.BuildRuntimer).
func NewSandboxRunner(rt runtime.Runtime, envdPort int, log *slog.Logger) (*SandboxRunner, error) {
	hl, ok := rt.(hostLayerRuntime)
	if !ok {
		name := "none"
		if rt != nil {
			name = rt.Name()
		}
		return nil, fmt.Errorf("RUN and COPY steps need a runtime whose writable layer the host can read (container or gvisor; this server has %s): %w", name, errdefs.ErrNotImplemented)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if envdPort == 0 {
		envdPort = 49983
	}
	return &SandboxRunner{rt: hl, envdPort: envdPort, log: log,
		http:  &http.Client{Transport: dialrace.NewTransport()},
		VCPUs: 2, MemoryMiB: 2048, DiskMiB: 10240}, nil
}

// Run implements Runner.
func (s *SandboxRunner) Run(ctx context.Context, rootfs string, execs []Exec, out func(e Exec, stream, line string)) (retErr error) {
	id := "b" + randomLower(20)
	spec := runtime.Spec{ID: id, TemplateID: "build", RootfsDir: rootfs, VCPUs: s.VCPUs, MemoryMiB: s.MemoryMiB,
		DiskMiB: s.DiskMiB, Pids: 4096, AllowInternet: true, Hostname: "e2b"}
	h, err := s.rt.Create(ctx, spec)
	if err != nil {
		return fmt.Errorf("start build sandbox: %w", err)
	}
	defer func() {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := s.rt.Kill(kctx, id); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("remove build sandbox: %w", err))
		}
	}()
	base := "http://" + net.JoinHostPort(h.Addr.String(), strconv.Itoa(s.envdPort))
	if err := s.waitEnvd(ctx, id, base); err != nil {
		return err
	}
	shell := "/bin/bash"
	if r, err := os.OpenRoot(rootfs); err == nil {
		if _, err := r.Stat("bin/bash"); err != nil {
			shell = "/bin/sh"
		}
		r.Close()
	}
	pc := processconnect.NewProcessClient(s.http, base, connect.WithProtoJSON())
	for _, e := range execs {
		code, err := s.exec(ctx, pc, shell, e, out)
		if err != nil {
			return fmt.Errorf("step %d (%s): %w", e.Index, e.Kind, err)
		}
		if code != 0 {
			return &ExitError{Index: e.Index, Kind: e.Kind, Code: code}
		}
	}
	// Freeze what the commands left running, then take their changes.
	if err := s.rt.Pause(ctx, id); err != nil {
		return fmt.Errorf("freeze build sandbox: %w", err)
	}
	dir := s.rt.SandboxDir(id)
	ids, err := idmap.Read(dir)
	if err != nil {
		return fmt.Errorf("build sandbox id range: %w", err)
	}
	upperDir := filepath.Join(dir, "disk", "upper")
	if fi, err := os.Lstat(upperDir); err != nil || !fi.IsDir() {
		return fmt.Errorf("build sandbox writable layer %s: not a directory (%v)", upperDir, err)
	}
	return upper.Apply(upperDir, rootfs, upper.IDShift{Host: ids.Host, Size: idmap.Size}, func(rel string) {
		s.log.Info("build: special file not copied into the template", "path", rel)
	})
}

// waitEnvd waits until envd in the build sandbox id answers /health. Each
// request has its own short deadline, so one lost on the way is retried;
// a failure names the last answer and the tail of the sandbox's envd log.
func (s *SandboxRunner) waitEnvd(ctx context.Context, id, base string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	last := "no request finished"
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, base+"/health", nil)
		res, err := s.http.Do(req)
		if err == nil {
			io.Copy(io.Discard, io.LimitReader(res.Body, 4096))
			res.Body.Close()
			last = res.Status
		} else {
			last = err.Error()
		}
		rcancel()
		if err == nil && res.StatusCode == http.StatusNoContent {
			return nil
		}
		select {
		case <-ctx.Done():
			logTail, _ := hostfs.Tail(filepath.Join(s.rt.SandboxDir(id), "log", hostfs.LogName), 2048)
			return fmt.Errorf("envd in the build sandbox did not answer (last: %s; envd.log: %q): %w", last, logTail, errdefs.ErrUnavailable)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// exec runs one command and returns its exit code (-1 for a signal).
func (s *SandboxRunner) exec(ctx context.Context, pc processconnect.ProcessClient, shell string, e Exec,
	out func(e Exec, stream, line string)) (int, error) {
	argv := []string{shell, "-l", "-c", e.Cmd}
	if shell == "/bin/sh" {
		argv = []string{shell, "-c", e.Cmd}
	}
	lines := map[string]*lineBuf{"stdout": {}, "stderr": {}}
	exit, err := runcmd.Run(ctx, pc, runcmd.Command{Argv: argv, User: e.User, Env: e.Env, Cwd: e.Workdir,
		KeepAlive: 50 * time.Second,
		Output: func(stream string, b []byte) {
			lines[stream].add(b, func(l string) { out(e, stream, l) })
		}})
	for name, l := range lines {
		l.flush(func(s string) { out(e, name, s) })
	}
	return exit.Code, err
}

// lineBuf splits a byte stream into lines (long lines are cut).
type lineBuf struct{ b []byte }

const maxLine = 4096

func (l *lineBuf) add(p []byte, line func(string)) {
	l.b = append(l.b, p...)
	for {
		i := bytes.IndexByte(l.b, '\n')
		if i < 0 {
			if len(l.b) >= maxLine {
				line(string(l.b[:maxLine]))
				l.b = l.b[maxLine:]
				continue
			}
			return
		}
		line(string(bytes.TrimRight(l.b[:i], "\r")))
		l.b = l.b[i+1:]
	}
}

func (l *lineBuf) flush(line func(string)) {
	if len(l.b) > 0 {
		line(string(l.b))
		l.b = nil
	}
}

func randomLower(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
