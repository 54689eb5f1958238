// Package volserver runs the NFS server of a microVM sandbox's volumes
// (cmd/moat-nfsd, package nfsd) on the host: one jailed process per
// sandbox with volumes, named after the sandbox, listening on the guest's
// gateway address inside the sandbox's network namespace, restarted when
// it dies while the sandbox runs, adopted by a restarted moat serve,
// killed with the sandbox.
//
// It exists apart from package vm because starting the process (the
// volumes' idmapped mounts, the listener, the jail, the cgroup) and
// supervising it is a lifecycle of its own that create, resume and
// recovery all drive.
//
// The jail (internal/jail NSCommand): root of a user namespace whose
// 65536 IDs are the sandbox's host range (the range its QEMU's uid comes
// from), so a file the guest creates as uid N is N's on the volume
// through an idmapped mount of the volume's host mount with that range
// (idmap.OpenTree), exactly as in a container sandbox; no capability on
// the host, and in its own namespace only those of nfsd.Caps; a mount
// namespace of a read-only tmpfs and the volume mounts (nosuid, nodev,
// noexec, nosymfollow); an empty network namespace (it serves on a
// socket opened for it in the sandbox's); its own PID, IPC and UTS
// namespaces; no_new_privs, non-dumpable; the sandbox's cgroup.
package volserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/guestinit"
	"github.com/moatsh/moat/internal/nfsd"
	"github.com/moatsh/moat/internal/runtime"
)

// Name is argv[0] of every server process (argv[1] is the sandbox ID).
const Name = "moat-nfsd"

// volumesFile records a sandbox's volumes in its directory, so that a
// resume or a restarted server starts the same server.
const volumesFile = "volumes.json"

// pidFile is the server's PID in the sandbox directory (root's, in a
// directory whose sticky bit keeps the sandbox's QEMU from replacing it).
const pidFile = "nfsd.pid"

// Config is one sandbox's server.
type Config struct {
	Sandbox string
	Dir     string // the sandbox's directory (pidfile, volumes.json)
	LogPath string // where the server's output goes (a capped tmpfs)
	Binary  string // moat-nfsd (opened as root and executed from that descriptor)
	NetNS   string // the sandbox's network namespace
	Cgroup  string // the sandbox's cgroup ("" for none)
	Host    uint32 // first host ID of the sandbox's range
	Volumes []runtime.VolumeMount
	Log     *slog.Logger
}

// Server is a supervised server process: while the sandbox runs, one
// that dies is started again (after a pause that grows to 5 s).
type Server struct {
	cfg    Config
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // the supervisor ended

	mu   sync.Mutex
	proc *proc // guarded by mu
}

// Start starts cfg's server and supervises it. The caller must Stop it.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	p, err := start(ctx, &cfg)
	if err != nil {
		return nil, err
	}
	return supervise(cfg, p), nil
}

// Adopt supervises the server a previous moat serve started for cfg's
// sandbox when it still runs, else starts one.
func Adopt(ctx context.Context, cfg Config) (*Server, error) {
	if p := adopt(cfg.Dir, cfg.Sandbox); p != nil {
		return supervise(cfg, p), nil
	}
	return Start(ctx, cfg)
}

// PID is the current server process's, 0 if none runs.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.pid.PID()
}

// Stop ends supervision and kills the server; idempotent.
func (s *Server) Stop() error {
	s.cancel()
	<-s.done
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	var err error
	if p != nil {
		err = p.kill()
	}
	_ = os.Remove(filepath.Join(s.cfg.Dir, pidFile))
	return err
}

// Detach ends supervision and leaves the process running, as a server
// that exits leaves it to its successor's Adopt (tests play that).
func (s *Server) Detach() {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.pid.Close()
		s.proc = nil
	}
}

// StopByName kills the server of the sandbox whose directory is dir (for
// sandboxes this process does not supervise): the one its pidfile names,
// and any other whose command line names the sandbox (one a crash left
// before its pidfile was written).
func StopByName(dir, sandbox string) error {
	var errs []error
	if p := adopt(dir, sandbox); p != nil {
		errs = append(errs, p.kill())
	}
	for _, pid := range Running(sandbox) {
		if pfd, err := runtime.OpenProcess(pid); err == nil {
			errs = append(errs, (&proc{pid: pfd}).kill())
		}
	}
	_ = os.Remove(filepath.Join(dir, pidFile))
	return errors.Join(errs...)
}

// Running lists the processes whose command line is a volume server of
// sandbox.
func Running(sandbox string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && string(b) == Name+"\x00"+sandbox+"\x00" {
			out = append(out, pid)
		}
	}
	return out
}

func supervise(cfg Config, p *proc) *Server {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, ctx: ctx, cancel: cancel, done: make(chan struct{}), proc: p}
	go s.loop()
	return s
}

// loop restarts the server whenever it exits, until Stop.
func (s *Server) loop() {
	defer close(s.done)
	backoff := 100 * time.Millisecond
	for {
		s.mu.Lock()
		p := s.proc
		s.mu.Unlock()
		started := time.Now()
		if p != nil {
			if err := p.pid.Wait(s.ctx); err != nil {
				return // Stop
			}
			s.mu.Lock()
			s.proc = nil
			s.mu.Unlock()
			p.pid.Close()
			s.cfg.Log.Warn("volume server exited; starting it again", "sandbox", s.cfg.Sandbox, "pid", p.pid.PID(),
				"ran", time.Since(started).Round(time.Millisecond))
		}
		if time.Since(started) > 30*time.Second {
			backoff = 100 * time.Millisecond
		}
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
		np, err := start(s.ctx, &s.cfg)
		if err != nil {
			s.cfg.Log.Warn("volume server did not start", "sandbox", s.cfg.Sandbox, "err", err)
		}
		s.mu.Lock()
		s.proc = np
		s.mu.Unlock()
	}
}

// WriteVolumes records vs in sandbox directory dir.
func WriteVolumes(dir string, vs []runtime.VolumeMount) error {
	b, err := json.Marshal(vs)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, volumesFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("record volumes: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, volumesFile)); err != nil {
		return fmt.Errorf("record volumes: %w", err)
	}
	return nil
}

// ReadVolumes returns the volumes recorded in dir; none without a record.
func ReadVolumes(dir string) ([]runtime.VolumeMount, error) {
	b, err := os.ReadFile(filepath.Join(dir, volumesFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("volumes of %s: %w", dir, err)
	}
	var vs []runtime.VolumeMount
	if err := json.Unmarshal(b, &vs); err != nil {
		return nil, fmt.Errorf("volumes of %s: %w", dir, err)
	}
	return vs, nil
}

// adopt finds the running server of sandbox in dir by its pidfile and
// command line, or returns nil.
func adopt(dir, sandbox string) *proc {
	b, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return nil
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || string(cmdline) != Name+"\x00"+sandbox+"\x00" {
		return nil
	}
	pfd, err := runtime.OpenProcess(pid)
	if err != nil {
		return nil
	}
	if pfd.Exited() {
		pfd.Close()
		return nil
	}
	return &proc{pid: pfd}
}

// Spawner is what the servers of one vm runtime share: their binary,
// found on first use, and the log.
type Spawner struct {
	Src string // the moat-nfsd binary ("" = Find's default places)
	Log *slog.Logger

	once sync.Once
	bin  string
	err  error
}

// Sandbox names the host objects of a sandbox its server needs.
type Sandbox struct {
	ID     string
	Dir    string // its directory
	NetNS  string // its network namespace
	Cgroup string // its cgroup
	Host   uint32 // the first host ID of its range
}

// Run starts the server of sb for vs and records vs in sb.Dir; with vs
// nil it serves the volumes recorded there (none: nil server), adopting
// the server a previous moat serve left when adopt is set. A
// missing binary is a server misconfiguration (500 with a short
// public text).
func (sp *Spawner) Run(ctx context.Context, sb Sandbox, vs []runtime.VolumeMount, adopt bool) (*Server, error) {
	if vs == nil {
		var err error
		if vs, err = ReadVolumes(sb.Dir); err != nil || len(vs) == 0 {
			return nil, err
		}
	}
	sp.once.Do(func() { sp.bin, sp.err = Find(sp.Src) })
	if sp.err != nil {
		return nil, fmt.Errorf("%v: %w", sp.err, errdefs.Publicf(errdefs.ErrInternal,
			"microVM runtime misconfigured: the volume server (moat-nfsd) is not installed"))
	}
	if err := WriteVolumes(sb.Dir, vs); err != nil {
		return nil, err
	}
	cfg := Config{Sandbox: sb.ID, Dir: sb.Dir, LogPath: filepath.Join(sb.Dir, "log", "nfsd.log"), Binary: sp.bin,
		NetNS: sb.NetNS, Cgroup: sb.Cgroup, Host: sb.Host, Volumes: vs, Log: sp.Log}
	if adopt {
		return Adopt(ctx, cfg)
	}
	return Start(ctx, cfg)
}

// GuestMountArgv is the guest command that mounts vs (moat-vminit's
// mount-volumes, see guestinit.MountVolumes), export i at vs[i].Target.
func GuestMountArgv(vs []runtime.VolumeMount) []string {
	argv := []string{"/proc/1/exe", guestinit.MountVolumesCmd}
	for i, v := range vs {
		argv = append(argv, nfsd.ExportName(i)+"="+v.Target)
	}
	return argv
}
