package jupyter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// ErrKernelDied is returned by pending and later calls once the kernel
// process has exited.
var ErrKernelDied = errors.New("jupyter: kernel died")

// Options tune Start.
type Options struct {
	// Logger receives diagnostics; slog.Default() when nil.
	Logger *slog.Logger
	// ConnDir holds connection files; os.TempDir() when empty.
	ConnDir string
}

// Kernel is a running kernel process plus its ZeroMQ channels.
type Kernel struct {
	spec    Spec
	opts    Options
	log     *slog.Logger
	session string

	mu  sync.Mutex // guards cur
	cur *instance
}

// instance is one incarnation of the kernel process; Restart replaces it.
type instance struct {
	info     ConnectionInfo
	connFile string
	signer   signer
	cmd      *exec.Cmd
	output   *tailBuffer
	log      *slog.Logger

	ctx    context.Context // cancelled on teardown, closes the sockets
	cancel context.CancelFunc

	shell, control, iopub, hb zmq4.Socket
	sendMu                    sync.Mutex
	hbMu                      sync.Mutex

	dead    chan struct{} // closed when the process exits
	exitErr error

	wmu     sync.Mutex
	waiters map[string]*waiter // by request msg_id
}

// waiter collects the replies and IOPub messages for one request.
type waiter struct {
	mu     sync.Mutex
	queue  []Message
	notify chan struct{}
	reply  chan Message
}

func newWaiter() *waiter {
	return &waiter{notify: make(chan struct{}, 1), reply: make(chan Message, 1)}
}

func (w *waiter) push(m Message) {
	w.mu.Lock()
	w.queue = append(w.queue, m)
	w.mu.Unlock()
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

func (w *waiter) drain() []Message {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queue
	w.queue = nil
	return q
}

// Start launches the kernel described by spec and waits until its shell
// and IOPub channels answer a kernel_info_request.
func Start(ctx context.Context, spec Spec, opts Options) (*Kernel, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	k := &Kernel{spec: spec, opts: opts, session: newID(), log: opts.Logger.With("kernel", spec.Name)}
	inst, err := k.launch(ctx)
	if err != nil {
		return nil, err
	}
	k.cur = inst
	return k, nil
}

// Spec returns the spec the kernel was started from.
func (k *Kernel) Spec() Spec { return k.spec }

func (k *Kernel) current() *instance {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cur
}

// launch starts a process and connects its channels.
func (k *Kernel) launch(ctx context.Context) (*instance, error) {
	info, err := newConnectionInfo(k.spec.Name)
	if err != nil {
		return nil, err
	}
	connFile, err := writeConnectionFile(k.opts.ConnDir, info, k.spec.Credential)
	if err != nil {
		return nil, err
	}
	argv := k.spec.argv(connFile)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = k.spec.Dir
	cmd.Env = os.Environ()
	for key, v := range k.spec.Env {
		cmd.Env = append(cmd.Env, key+"="+v)
	}
	cmd.Env = append(cmd.Env, k.spec.ExtraEnv...)
	out := &tailBuffer{max: 8 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = procAttr(k.spec.Credential)
	if err := cmd.Start(); err != nil {
		os.Remove(connFile)
		return nil, fmt.Errorf("start kernel %q: %w", k.spec.Name, err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	inst := &instance{
		info: info, connFile: connFile, signer: signer{key: []byte(info.Key)}, cmd: cmd, output: out,
		log: k.log.With("pid", cmd.Process.Pid), ctx: sctx, cancel: cancel,
		dead: make(chan struct{}), waiters: map[string]*waiter{},
	}
	go inst.reap()
	if err := inst.connect(ctx, k.session); err != nil {
		inst.teardown(context.Background(), false)
		return nil, fmt.Errorf("start kernel %q: %w (output: %q)", k.spec.Name, err, out.String())
	}
	inst.log.Debug("kernel started", "conn", connFile)
	return inst, nil
}

// reap waits for the process and marks the instance dead.
func (in *instance) reap() {
	err := in.cmd.Wait()
	if err == nil {
		err = errors.New("exit status 0")
	}
	in.exitErr = err
	close(in.dead)
	in.cancel()
	in.log.Debug("kernel exited", "err", err)
}

func (in *instance) isDead() bool {
	select {
	case <-in.dead:
		return true
	default:
		return false
	}
}

func (in *instance) deadErr() error {
	return fmt.Errorf("%w: %v", ErrKernelDied, in.exitErr)
}

// connect dials every channel, starts the readers and handshakes.
func (in *instance) connect(ctx context.Context, session string) error {
	stop := context.AfterFunc(ctx, in.cancel)
	defer stop()
	opts := []zmq4.Option{zmq4.WithDialerRetry(50 * time.Millisecond), zmq4.WithDialerMaxRetries(-1)}
	in.shell = zmq4.NewDealer(in.ctx, opts...)
	in.control = zmq4.NewDealer(in.ctx, opts...)
	in.iopub = zmq4.NewSub(in.ctx, opts...)
	in.hb = zmq4.NewReq(in.ctx, opts...)
	if err := in.iopub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		return fmt.Errorf("subscribe iopub: %w", err)
	}
	for _, c := range []struct {
		s    zmq4.Socket
		port int
	}{{in.shell, in.info.ShellPort}, {in.iopub, in.info.IOPubPort}, {in.control, in.info.ControlPort}, {in.hb, in.info.HBPort}} {
		if err := c.s.Dial(in.info.addr(c.port)); err != nil {
			if in.isDead() {
				return in.deadErr()
			}
			return fmt.Errorf("dial %s: %w", in.info.addr(c.port), err)
		}
	}
	go in.readLoop("shell", in.shell, true)
	go in.readLoop("control", in.control, true)
	go in.readLoop("iopub", in.iopub, false)
	return in.handshake(ctx, session)
}

// handshake repeats kernel_info_request until both its reply and an IOPub
// message for it arrive, proving the SUB subscription is live.
func (in *instance) handshake(ctx context.Context, session string) error {
	for {
		h := newHeader(session, "kernel_info_request")
		w := in.register(h.MsgID)
		err := in.send(in.shell, Message{Header: h})
		if err != nil {
			in.unregister(h.MsgID)
			return err
		}
		gotReply, gotIO := false, false
		timer := time.NewTimer(time.Second)
	wait:
		for !(gotReply && gotIO) {
			select {
			case <-w.reply:
				gotReply = true
			case <-w.notify:
				gotIO = len(w.drain()) > 0 || gotIO
			case <-timer.C:
				break wait
			case <-in.dead:
				in.unregister(h.MsgID)
				return in.deadErr()
			case <-ctx.Done():
				in.unregister(h.MsgID)
				return fmt.Errorf("kernel handshake: %w", ctx.Err())
			}
		}
		timer.Stop()
		in.unregister(h.MsgID)
		if gotReply && gotIO {
			return nil
		}
	}
}

func (in *instance) register(id string) *waiter {
	w := newWaiter()
	in.wmu.Lock()
	in.waiters[id] = w
	in.wmu.Unlock()
	return w
}

func (in *instance) unregister(id string) {
	in.wmu.Lock()
	delete(in.waiters, id)
	in.wmu.Unlock()
}

func (in *instance) lookup(id string) *waiter {
	in.wmu.Lock()
	defer in.wmu.Unlock()
	return in.waiters[id]
}

// send signs and writes m on s.
func (in *instance) send(s zmq4.Socket, m Message) error {
	frames, err := in.signer.encode(m)
	if err != nil {
		return err
	}
	in.sendMu.Lock()
	defer in.sendMu.Unlock()
	if err := s.SendMulti(zmq4.NewMsgFrom(frames...)); err != nil {
		if in.isDead() {
			return in.deadErr()
		}
		return fmt.Errorf("send %s: %w", m.Header.MsgType, err)
	}
	return nil
}

// readLoop decodes messages from one channel and routes them by parent
// msg_id. Messages with bad signatures or bad framing are dropped.
func (in *instance) readLoop(name string, s zmq4.Socket, isReply bool) {
	for {
		raw, err := s.Recv()
		if err != nil {
			if in.ctx.Err() == nil {
				in.log.Debug("channel closed", "channel", name, "err", err)
			}
			return
		}
		m, err := in.signer.decode(raw.Frames)
		if err != nil {
			in.log.Warn("dropping kernel message", "channel", name, "err", err)
			continue
		}
		w := in.lookup(m.ParentID())
		if w == nil {
			continue
		}
		if isReply {
			select {
			case w.reply <- m:
			default:
			}
			continue
		}
		w.push(m)
	}
}

// teardown stops the process (politely when graceful) and frees resources.
func (in *instance) teardown(ctx context.Context, graceful bool) {
	if graceful && !in.isDead() {
		h := newHeader("", "shutdown_request")
		_ = in.send(in.control, Message{Header: h, Content: json.RawMessage(`{"restart":false}`)})
		t := time.NewTimer(2 * time.Second)
		select {
		case <-in.dead:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	killGroup(in.cmd)
	<-in.dead
	in.cancel()
	for _, s := range []zmq4.Socket{in.shell, in.control, in.iopub, in.hb} {
		if s != nil {
			s.Close()
		}
	}
	os.Remove(in.connFile)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
