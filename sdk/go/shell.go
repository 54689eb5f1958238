package moat

import (
	"context"
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"

	"github.com/moatsh/moat/api/envd/process"
	"github.com/moatsh/moat/api/envd/process/processconnect"
)

// TermSize is a terminal's size in characters.
type TermSize struct{ Cols, Rows uint32 }

// ShellOptions configure Shell.
type ShellOptions struct {
	Cmd    string          // the program ("" = /bin/bash -i -l)
	User   string          // account to run as; "" = envd's default
	Size   TermSize        // the terminal's size at start (0 = 80x24)
	Stdin  io.Reader       // keys typed, sent to the terminal as they come; nil sends none
	Output io.Writer       // what the terminal shows; nil discards it
	Resize <-chan TermSize // new sizes of the local terminal
	Envs   map[string]string
}

// Shell runs an interactive program on a pseudo-terminal in the sandbox
// (E2B's commands.pty): Stdin goes to it as typed, its screen output to
// Output, each size from Resize resizes it. It returns the program's exit
// code once it ends; ending ctx kills it.
func (s *Sandbox) Shell(ctx context.Context, opts ShellOptions) (int, error) {
	pc := processconnect.NewProcessClient(s.client.httpClient(), s.client.sandboxURL(), connect.WithProtoJSON())
	size := opts.Size
	if size.Cols == 0 || size.Rows == 0 {
		size = TermSize{Cols: 80, Rows: 24}
	}
	cfg := &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-i", "-l"}, Envs: opts.Envs}
	if opts.Cmd != "" {
		cfg.Args = []string{"-l", "-c", opts.Cmd}
	}
	req := connect.NewRequest(&process.StartRequest{Process: cfg, Pty: &process.PTY{Size: &process.PTY_Size{Cols: size.Cols, Rows: size.Rows}}})
	s.setEnvdHeaders(req.Header(), opts.User)
	req.Header().Set("Keepalive-Ping-Interval", "50")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := pc.Start(ctx, req)
	if err != nil {
		return -1, fromConnect("shell: start", err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetEvent().GetStart() == nil {
		return -1, errors.Join(fmt.Errorf("shell: no start event: %w", ErrUnavailable), fromConnect("shell", stream.Err()))
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	errc := make(chan error, 2)
	if opts.Stdin != nil {
		go func() { errc <- s.shellInput(ctx, pc, pid, opts) }()
	}
	if opts.Resize != nil {
		go func() { errc <- s.shellResize(ctx, pc, pid, opts) }()
	}
	code, err := consume(&replayed{s: stream, first: stream.Msg()}, RunOptions{Stdout: opts.Output, User: opts.User})
	select {
	case ierr := <-errc: // a failed input or resize, reported after the end
		if err == nil && ierr != nil && !errors.Is(ierr, context.Canceled) {
			err = ierr
		}
	default:
	}
	return code, err
}

// shellInput sends what opts.Stdin reads to process pid's terminal.
func (s *Sandbox) shellInput(ctx context.Context, pc processconnect.ProcessClient, pid uint32, opts ShellOptions) error {
	buf := make([]byte, 4096)
	for {
		n, rerr := opts.Stdin.Read(buf)
		if n > 0 {
			in := connect.NewRequest(&process.SendInputRequest{
				Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}},
				Input:   &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: append([]byte(nil), buf[:n]...)}},
			})
			s.setEnvdHeaders(in.Header(), opts.User)
			if _, err := pc.SendInput(ctx, in); err != nil {
				return fromConnect("shell: input", err)
			}
		}
		if rerr != nil {
			if rerr == io.EOF {
				return nil
			}
			return fmt.Errorf("shell: read input: %w", rerr)
		}
	}
}

// shellResize applies each size from opts.Resize to process pid's terminal.
func (s *Sandbox) shellResize(ctx context.Context, pc processconnect.ProcessClient, pid uint32, opts ShellOptions) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case sz, ok := <-opts.Resize:
			if !ok {
				return nil
			}
			up := connect.NewRequest(&process.UpdateRequest{
				Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}},
				Pty:     &process.PTY{Size: &process.PTY_Size{Cols: sz.Cols, Rows: sz.Rows}},
			})
			s.setEnvdHeaders(up.Header(), opts.User)
			if _, err := pc.Update(ctx, up); err != nil {
				return fromConnect("shell: resize", err)
			}
		}
	}
}

// replayed is a stream whose first message was read already: Receive
// yields it again first, so consume sees the start event.
type replayed struct {
	s     *connect.ServerStreamForClient[process.StartResponse]
	first *process.StartResponse
	cur   *process.StartResponse
}

func (r *replayed) Receive() bool {
	if r.first != nil {
		r.cur, r.first = r.first, nil
		return true
	}
	if !r.s.Receive() {
		return false
	}
	r.cur = r.s.Msg()
	return true
}

func (r *replayed) Msg() *process.StartResponse { return r.cur }
func (r *replayed) Err() error                  { return r.s.Err() }
