// Package process implements envd's process.Process Connect service: it
// starts commands (with pipes or a PTY) inside the sandbox for the E2B SDKs'
// commands and pty APIs, streams their output to any number of attached
// clients, and takes input, signals and PTY resizes. It exists as its own
// package because its wire behaviour (stream contract, keepalives, lifetime
// bound by Connect-Timeout-Ms, re-attach, retained end events) must match E2B
// envd exactly for the unmodified SDKs to work.
package process

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	pb "github.com/moatsh/moat/api/envd/process"
	"github.com/moatsh/moat/api/envd/process/processconnect"
	"github.com/moatsh/moat/internal/envd/paths"
	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/envd/users"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errconnect"
)

// retainEnd is how long Connect can still fetch the end event of a process
// that has ended.
const retainEnd = 30 * time.Second

// maxRequestBytes bounds a request message (SendInput carries data).
const maxRequestBytes = 16 << 20

// compressMinBytes: a message shorter than this goes uncompressed even to
// a client that accepts gzip (connect-go's clients do; E2B's SDKs do not).
// Process events are mostly a few dozen bytes, where a gzip writer costs
// more than it saves.
const compressMinBytes = 1024

// Service is the process.Process service.
type Service struct {
	st    *state.State
	users *users.Resolver
	log   *slog.Logger

	mu     sync.Mutex
	procs  map[uint32]*proc // live processes and, for retainEnd, ended ones
	closed bool
}

var _ processconnect.ProcessHandler = (*Service)(nil)

// NewService returns the service; st and users supply defaults and accounts.
func NewService(st *state.State, users *users.Resolver, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	return &Service{st: st, users: users, log: log, procs: map[uint32]*proc{}}
}

// Handler returns the mount path and HTTP handler of the service.
func (s *Service) Handler() (path string, h http.Handler) {
	return processconnect.NewProcessHandler(s, connect.WithReadMaxBytes(maxRequestBytes), connect.WithCompressMinBytes(compressMinBytes))
}

// Close kills every live process (and its process group), refuses new ones,
// and waits briefly for them to end.
func (s *Service) Close() {
	s.mu.Lock()
	s.closed = true
	var live []*proc
	for _, p := range s.procs {
		switch {
		case !p.ended():
			live = append(live, p)
		case p.lingering():
			_ = p.signal(unix.SIGKILL) // children that outlived it still hold its output
		}
	}
	s.mu.Unlock()
	for _, p := range live {
		_ = p.signal(unix.SIGKILL)
	}
	timeout := time.After(5 * time.Second)
	for _, p := range live {
		select {
		case <-p.done:
		case <-timeout:
			s.log.Warn("process did not end after SIGKILL", "pid", p.pid)
			return
		}
	}
}

// Start starts a process and streams its events until it ends.
func (s *Service) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	sub := newSubscriber()
	p, err := s.start(ctx, req, sub)
	if err != nil {
		return errconnect.ToConnect(err)
	}
	defer p.unsubscribe(sub)
	return serve(ctx, p, sub, req.Header(), func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.StartResponse{Event: ev})
	})
}

// Connect attaches to a running (or recently ended) process.
func (s *Service) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	p, err := s.lookup(req.Msg.GetProcess(), false)
	if err != nil {
		return errconnect.ToConnect(err)
	}
	sub := p.subscribe()
	defer p.unsubscribe(sub)
	return serve(ctx, p, sub, req.Header(), func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.ConnectResponse{Event: ev})
	})
}

func serve(ctx context.Context, p *proc, sub *subscriber, h http.Header, send func(*pb.ProcessEvent) error) error {
	err := sub.serve(ctx, p.pid, keepaliveInterval(h), send)
	if err == nil {
		return nil
	}
	cause := ctx.Err()
	if cause == nil && errors.Is(err, context.DeadlineExceeded) {
		cause = err
	}
	if cause != nil {
		return errconnect.ToConnect(fmt.Errorf("stream of process %d: %w", p.pid, cause))
	}
	return err
}

// start validates the request, spawns the process with sub subscribed and
// registers it.
func (s *Service) start(ctx context.Context, req *connect.Request[pb.StartRequest], sub *subscriber) (*proc, error) {
	cfg := req.Msg.GetProcess()
	if cfg == nil {
		return nil, fmt.Errorf("process config is required: %w", errdefs.ErrInvalidArgument)
	}
	u, err := s.users.Select(req.Header(), s.st.DefaultUser())
	if err != nil {
		return nil, err
	}
	cwd, err := paths.Resolve(cfg.GetCwd(), u.Home, s.st.DefaultWorkdir())
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(cwd); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("cwd '%s' does not exist: %w", cwd, errdefs.ErrInvalidArgument)
		}
		return nil, fmt.Errorf("cwd '%s': %v: %w", cwd, err, errdefs.ErrInvalidArgument)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("cwd '%s' is not a directory: %w", cwd, errdefs.ErrInvalidArgument)
	}
	spec := spawnSpec{config: cfg, tag: req.Msg.Tag, user: u, cwd: cwd,
		env: buildEnv(u, s.st.Env(), cfg.GetEnvs()), stdin: req.Msg.Stdin == nil || req.Msg.GetStdin()}
	if req.Msg.Pty != nil {
		spec.pty = req.Msg.GetPty().GetSize()
		if spec.pty == nil {
			spec.pty = &pb.PTY_Size{Cols: 80, Rows: 24}
		}
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("envd is shutting down: %w", errdefs.ErrUnavailable)
	}
	p, err := spawn(spec, sub)
	if err != nil {
		if errdefs.IsInvalidArgument(err) {
			return nil, err
		}
		return nil, fmt.Errorf("error starting process: %v: %w", err, errdefs.ErrInternal)
	}
	s.register(ctx, p, u.Name)
	return p, nil
}

// register records p, bounds its lifetime by ctx's deadline (the client's
// Connect-Timeout-Ms) but not by ctx's cancellation, and starts it.
func (s *Service) register(ctx context.Context, p *proc, user string) {
	var timer *time.Timer
	if deadline, ok := ctx.Deadline(); ok {
		timer = time.AfterFunc(time.Until(deadline), func() {
			s.log.Info("process timed out, killing", "pid", p.pid)
			_ = p.signal(unix.SIGKILL)
		})
	}
	s.mu.Lock()
	s.procs[p.pid] = p
	s.mu.Unlock()
	s.log.Info("process started", "pid", p.pid, "cmd", p.config.GetCmd(), "user", user, "pty", p.ptmx != nil)
	p.run(func() {
		if timer != nil {
			timer.Stop()
		}
		end := p.end.GetEnd()
		s.log.Info("process ended", "pid", p.pid, "status", end.GetStatus())
		time.AfterFunc(retainEnd, func() {
			s.mu.Lock()
			if s.procs[p.pid] == p {
				delete(s.procs, p.pid)
			}
			s.mu.Unlock()
		})
	})
}

// lookup finds the process sel selects; live excludes ended processes.
func (s *Service) lookup(sel *pb.ProcessSelector, live bool) (*proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch v := sel.GetSelector().(type) {
	case *pb.ProcessSelector_Pid:
		p := s.procs[v.Pid]
		if p == nil || (live && p.ended()) {
			return nil, fmt.Errorf("process with pid %d not found: %w", v.Pid, errdefs.ErrNotFound)
		}
		return p, nil
	case *pb.ProcessSelector_Tag:
		var found *proc
		for _, p := range s.procs {
			if p.tag == nil || *p.tag != v.Tag || (live && p.ended()) {
				continue
			}
			if found == nil || (found.ended() && !p.ended()) {
				found = p
			}
		}
		if found == nil {
			return nil, fmt.Errorf("process with tag %s not found: %w", v.Tag, errdefs.ErrNotFound)
		}
		return found, nil
	default:
		return nil, fmt.Errorf("process selector (pid or tag) is required: %w", errdefs.ErrInvalidArgument)
	}
}

// List returns the live processes.
func (s *Service) List(ctx context.Context, req *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	s.mu.Lock()
	var out []*pb.ProcessInfo
	for _, p := range s.procs {
		if !p.ended() {
			out = append(out, p.info())
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Pid < out[j].Pid })
	return connect.NewResponse(&pb.ListResponse{Processes: out}), nil
}

// Update resizes a process's PTY.
func (s *Service) Update(ctx context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	p, err := s.lookup(req.Msg.GetProcess(), true)
	if err != nil {
		return nil, errconnect.ToConnect(err)
	}
	if size := req.Msg.GetPty().GetSize(); size != nil {
		if p.ptmx == nil {
			return nil, errconnect.ToConnect(fmt.Errorf("process %d has no pty: %w", p.pid, errdefs.ErrInternal))
		}
		p.stdinMu.Lock()
		err := setWinsize(p.ptmx, size)
		p.stdinMu.Unlock()
		if err != nil {
			return nil, errconnect.ToConnect(fmt.Errorf("process %d: %v: %w", p.pid, err, errdefs.ErrInternal))
		}
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}

// SendInput writes to a process's stdin or PTY.
func (s *Service) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	p, err := s.lookup(req.Msg.GetProcess(), true)
	if err != nil {
		return nil, errconnect.ToConnect(err)
	}
	if err := input(ctx, p, req.Msg.GetInput()); err != nil {
		return nil, errconnect.ToConnect(err)
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

func input(ctx context.Context, p *proc, in *pb.ProcessInput) error {
	switch v := in.GetInput().(type) {
	case *pb.ProcessInput_Stdin:
		return p.writeInput(ctx, v.Stdin, false)
	case *pb.ProcessInput_Pty:
		return p.writeInput(ctx, v.Pty, true)
	default:
		return fmt.Errorf("input (stdin or pty) is required: %w", errdefs.ErrInvalidArgument)
	}
}

// StreamInput takes a start message selecting the process, then input.
func (s *Service) StreamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	var p *proc
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			found, err := s.lookup(ev.Start.GetProcess(), true)
			if err != nil {
				return nil, errconnect.ToConnect(err)
			}
			p = found
		case *pb.StreamInputRequest_Data:
			if p == nil {
				return nil, errconnect.ToConnect(fmt.Errorf("first message must be start: %w", errdefs.ErrInvalidArgument))
			}
			if err := input(ctx, p, ev.Data.GetInput()); err != nil {
				return nil, errconnect.ToConnect(err)
			}
		case *pb.StreamInputRequest_Keepalive:
		default:
			return nil, errconnect.ToConnect(fmt.Errorf("empty stream input event: %w", errdefs.ErrInvalidArgument))
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

// SendSignal sends SIGTERM or SIGKILL to a process's group.
func (s *Service) SendSignal(ctx context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	p, err := s.lookup(req.Msg.GetProcess(), true)
	if err != nil {
		return nil, errconnect.ToConnect(err)
	}
	var sig unix.Signal
	switch req.Msg.GetSignal() {
	case pb.Signal_SIGNAL_SIGTERM:
		sig = unix.SIGTERM
	case pb.Signal_SIGNAL_SIGKILL:
		sig = unix.SIGKILL
	default:
		return nil, errconnect.ToConnect(fmt.Errorf("signal %s: %w", req.Msg.GetSignal(), errdefs.ErrNotImplemented))
	}
	if err := p.signal(sig); err != nil {
		return nil, errconnect.ToConnect(fmt.Errorf("%v: %w", err, errdefs.ErrInternal))
	}
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}

// CloseStdin closes a process's stdin pipe (idempotent).
func (s *Service) CloseStdin(ctx context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	p, err := s.lookup(req.Msg.GetProcess(), true)
	if err != nil {
		return nil, errconnect.ToConnect(err)
	}
	if p.ptmx != nil {
		return nil, errconnect.ToConnect(fmt.Errorf("process %d has a pty; send Ctrl-D (0x04) instead: %w", p.pid, errdefs.ErrInternal))
	}
	p.closeStdin()
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}
