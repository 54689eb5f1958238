package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	pb "github.com/moatsh/moat/api/envd/process"
	"github.com/moatsh/moat/internal/envd/users"
	"github.com/moatsh/moat/internal/errdefs"
)

// Read chunk sizes, as in E2B envd.
const (
	pipeChunk = 32 << 10
	ptyChunk  = 16 << 10
)

// defaultPath is PATH for processes when envd itself has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// proc is one process started by Start.
type proc struct {
	pid    uint32
	tag    *string
	config *pb.ProcessConfig
	cmd    *exec.Cmd

	ptmx *os.File // PTY master; nil without a PTY

	stdinMu sync.Mutex
	stdin   *os.File // write end of the stdin pipe; nil when absent or closed

	readers []*outReader
	discard atomic.Bool // set once the process has ended: later output is dropped

	mu   sync.Mutex
	subs map[*subscriber]struct{}
	end  *pb.ProcessEvent // set once, when the process has ended and all output was published
	done chan struct{}    // closed when end is set
}

// outReader copies one output stream (stdout, stderr or the PTY) to the
// subscribers.
type outReader struct {
	f     *os.File
	chunk int
	wrap  func([]byte) *pb.ProcessEvent_DataEvent
	done  chan struct{}

	// mu is held across each read syscall and the publishing of what it
	// returned, so that drain, holding it, sees every byte either still
	// unread in the stream or already published, never in flight.
	mu       sync.Mutex
	lastData time.Time // when a read last returned data
}

// testHookRead, when set, runs after a read returned data and before it is
// published (tests use it to stretch that window).
var testHookRead func()

// spawnSpec is what Start resolved from a request.
type spawnSpec struct {
	config *pb.ProcessConfig
	tag    *string
	user   *users.User
	cwd    string
	env    []string
	pty    *pb.PTY_Size // nil without a PTY
	stdin  bool
}

// buildEnv merges PATH, HOME, USER, LOGNAME of u, then global, then request
// variables; later wins.
func buildEnv(u *users.User, global, request map[string]string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = defaultPath
	}
	m := map[string]string{"PATH": path, "HOME": u.Home, "USER": u.Name, "LOGNAME": u.Name}
	for k, v := range global {
		m[k] = v
	}
	for k, v := range request {
		m[k] = v
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// lookPath finds cmd in the PATH of env (not envd's own PATH).
func lookPath(cmd string, env []string) (string, error) {
	if cmd == "" {
		return "", fmt.Errorf("empty command: %w", errdefs.ErrInvalidArgument)
	}
	if strings.Contains(cmd, "/") {
		return cmd, nil
	}
	path := defaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, cmd)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH", cmd)
}

// spawn starts the process with sub already subscribed, so that sub sees all
// of its output.
func spawn(spec spawnSpec, sub *subscriber) (*proc, error) {
	path, err := lookPath(spec.config.GetCmd(), spec.env)
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{Path: path, Args: append([]string{spec.config.GetCmd()}, spec.config.GetArgs()...), Env: spec.env, Dir: spec.cwd}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if !spec.user.IsCurrent() {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: spec.user.UID, Gid: spec.user.GID, Groups: spec.user.Groups}
	}
	p := &proc{tag: spec.tag, config: proto.Clone(spec.config).(*pb.ProcessConfig), cmd: cmd,
		subs: map[*subscriber]struct{}{sub: {}}, done: make(chan struct{})}
	var childEnds []*os.File // closed in the parent once the child has them
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
	}()
	if spec.pty != nil {
		childEnds, err = p.setupPTY(spec.pty)
	} else {
		childEnds, err = p.setupPipes(spec.stdin)
	}
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		p.closeParentEnds()
		return nil, fmt.Errorf("start %s: %w", spec.config.GetCmd(), err)
	}
	p.pid = uint32(cmd.Process.Pid)
	for _, r := range p.readers {
		r.done = make(chan struct{})
	}
	return p, nil
}

func (p *proc) setupPipes(withStdin bool) (childEnds []*os.File, err error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	childEnds = []*os.File{outW, errW}
	p.cmd.Stdout, p.cmd.Stderr = outW, errW
	p.readers = []*outReader{
		{f: outR, chunk: pipeChunk, wrap: func(b []byte) *pb.ProcessEvent_DataEvent {
			return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stdout{Stdout: b}}
		}},
		{f: errR, chunk: pipeChunk, wrap: func(b []byte) *pb.ProcessEvent_DataEvent {
			return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stderr{Stderr: b}}
		}},
	}
	if withStdin {
		inR, inW, err := os.Pipe()
		if err != nil {
			p.closeParentEnds()
			for _, f := range childEnds {
				f.Close()
			}
			return nil, fmt.Errorf("stdin pipe: %w", err)
		}
		childEnds = append(childEnds, inR)
		p.cmd.Stdin = inR
		p.stdin = inW
	}
	return childEnds, nil
}

func (p *proc) setupPTY(size *pb.PTY_Size) (childEnds []*os.File, err error) {
	master, tty, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("open pty: %w", err)
	}
	// pty.Open used Fd(), which put the master into blocking mode; re-create
	// it as a pollable file so that deadlines and Close work.
	fd, err := unix.Dup(int(master.Fd()))
	master.Close()
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err != nil {
		tty.Close()
		return nil, fmt.Errorf("pty master: %w", err)
	}
	p.ptmx = os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := setWinsize(p.ptmx, size); err != nil {
		p.ptmx.Close()
		tty.Close()
		return nil, err
	}
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = tty, tty, tty
	p.cmd.SysProcAttr.Setctty = true
	p.cmd.SysProcAttr.Ctty = 0
	p.readers = []*outReader{{f: p.ptmx, chunk: ptyChunk, wrap: func(b []byte) *pb.ProcessEvent_DataEvent {
		return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Pty{Pty: b}}
	}}}
	return []*os.File{tty}, nil
}

// closeParentEnds closes the parent's ends after a failed start.
func (p *proc) closeParentEnds() {
	for _, r := range p.readers {
		r.f.Close()
	}
	if p.stdin != nil {
		p.stdin.Close()
	}
}

func setWinsize(f *os.File, size *pb.PTY_Size) error {
	ws := &unix.Winsize{Row: uint16(size.GetRows()), Col: uint16(size.GetCols())}
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("pty: %w", err)
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) { ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, ws) }); err != nil {
		return fmt.Errorf("pty: %w", err)
	}
	if ierr != nil {
		return fmt.Errorf("resize pty: %w", ierr)
	}
	return nil
}

// pending reports how many bytes wait unread in f.
func pending(f *os.File) int {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ) })
	return n
}

// run starts the output readers and publishes the end event once the
// process has exited and its output has been published. onEnd runs after.
func (p *proc) run(onEnd func()) {
	for _, r := range p.readers {
		go p.read(r)
	}
	go func() {
		werr := p.cmd.Wait()
		p.drain()
		p.closeStdin()
		p.finish(endEvent(p.cmd.ProcessState, werr))
		onEnd()
	}()
}

// read publishes r's output until EOF; once the process has ended (discard),
// it keeps reading so that surviving children never block, but drops data.
func (p *proc) read(r *outReader) {
	defer close(r.done)
	defer r.f.Close()
	rc, err := r.f.SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, r.chunk)
	for {
		var n int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			n, rerr = readNoEINTR(int(fd), buf)
			if rerr == unix.EAGAIN {
				return false // wait until readable
			}
			if n > 0 {
				r.lastData = time.Now()
				if testHookRead != nil {
					testHookRead()
				}
				if !p.discard.Load() {
					p.publish(&pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: r.wrap(append([]byte(nil), buf[:n]...))}}, n)
				}
			}
			return true
		})
		if err != nil || rerr != nil || n <= 0 { // EOF, EIO of a closed PTY, or closed
			return
		}
	}
}

// readNoEINTR is one read(2), retried on EINTR.
func readNoEINTR(fd int, buf []byte) (int, error) {
	for {
		n, err := unix.Read(fd, buf)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// drain waits, after the process has exited, until its output has been
// published: every reader has hit EOF, or its stream has been empty and
// quiet for a moment (a surviving child still holds it open, e.g.
// `server &`). Output read after that is dropped.
func (p *proc) drain() {
	const settle = 20 * time.Millisecond
	if p.readersDone(settle) {
		p.discard.Store(true)
		return
	}
	tick := time.NewTicker(settle)
	defer tick.Stop()
	for !p.drained(settle) {
		<-tick.C
	}
}

// readersDone waits up to d for every reader to hit EOF, the usual case.
func (p *proc) readersDone(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for _, r := range p.readers {
		select {
		case <-r.done:
		case <-timer.C:
			return false
		}
	}
	return true
}

// drained sets discard if no open stream holds unread bytes or returned
// data within settle. It holds every open reader's lock while deciding, so
// no read can be between the syscall and its publish.
func (p *proc) drained(settle time.Duration) bool {
	var open []*outReader
	for _, r := range p.readers {
		select {
		case <-r.done:
		default:
			open = append(open, r)
		}
	}
	for _, r := range open {
		r.mu.Lock()
		defer r.mu.Unlock()
	}
	for _, r := range open {
		if time.Since(r.lastData) < settle || pending(r.f) > 0 {
			return false
		}
	}
	p.discard.Store(true)
	return true
}

func endEvent(ps *os.ProcessState, werr error) *pb.ProcessEvent {
	end := &pb.ProcessEvent_EndEvent{ExitCode: -1}
	if ps != nil {
		end.ExitCode = int32(ps.ExitCode())
		end.Exited = ps.Exited()
		end.Status = ps.String()
	}
	if werr != nil {
		msg := werr.Error()
		end.Error = &msg
	}
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}}
}

// publish fans ev out to the current subscribers, in order.
func (p *proc) publish(ev *pb.ProcessEvent, size int) {
	p.mu.Lock()
	subs := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	for _, s := range subs {
		s.publish(ev, size)
	}
}

// finish records and publishes the end event.
func (p *proc) finish(ev *pb.ProcessEvent) {
	p.mu.Lock()
	p.end = ev
	subs := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	close(p.done)
	p.mu.Unlock()
	for _, s := range subs {
		s.publish(ev, 0)
	}
}

// subscribe adds a subscriber; after the end it gets the retained end event.
func (p *proc) subscribe() *subscriber {
	s := newSubscriber()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end != nil {
		s.publish(p.end, 0)
		return s
	}
	p.subs[s] = struct{}{}
	return s
}

func (p *proc) unsubscribe(s *subscriber) {
	s.leave()
	p.mu.Lock()
	delete(p.subs, s)
	p.mu.Unlock()
}

// ended reports whether the process has ended.
func (p *proc) ended() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// lingering reports whether some output stream is still open, held by a
// child that outlived the process.
func (p *proc) lingering() bool {
	for _, r := range p.readers {
		select {
		case <-r.done:
		default:
			return true
		}
	}
	return false
}

// signal sends sig to the process group.
func (p *proc) signal(sig syscall.Signal) error {
	if err := unix.Kill(-int(p.pid), sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal process %d: %w", p.pid, err)
	}
	return nil
}

// writeInput writes data to stdin or the PTY, giving up when ctx ends.
func (p *proc) writeInput(ctx context.Context, data []byte, toPTY bool) error {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if toPTY {
		if p.ptmx == nil {
			return fmt.Errorf("process %d has no pty: %w", p.pid, errdefs.ErrInternal)
		}
		return writeCtx(ctx, p.ptmx, data)
	}
	if p.ptmx != nil {
		return fmt.Errorf("process %d has a pty, send pty input: %w", p.pid, errdefs.ErrInternal)
	}
	if p.stdin == nil {
		return fmt.Errorf("stdin of process %d is not enabled or already closed: %w", p.pid, errdefs.ErrInternal)
	}
	return writeCtx(ctx, p.stdin, data)
}

func writeCtx(ctx context.Context, f *os.File, data []byte) error {
	_ = f.SetWriteDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Now()) })
	defer stop()
	if _, err := f.Write(data); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("write input: %w", ctx.Err())
		}
		return fmt.Errorf("write input: %v: %w", err, errdefs.ErrInternal)
	}
	return nil
}

// closeStdin closes the stdin pipe; it is idempotent.
func (p *proc) closeStdin() {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
	}
}

// info describes p for List.
func (p *proc) info() *pb.ProcessInfo {
	return &pb.ProcessInfo{Config: p.config, Pid: p.pid, Tag: p.tag}
}
