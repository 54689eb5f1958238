package jupyter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/go-zeromq/zmq4"
)

// InterruptGrace is how long Execute waits for the kernel to go idle after
// interrupting it because ctx ended.
var InterruptGrace = 10 * time.Second

// ErrInterruptTimeout is returned when an interrupted execution did not
// finish within InterruptGrace; the kernel should be restarted.
var ErrInterruptTimeout = errors.New("jupyter: kernel did not stop after interrupt")

// ExecuteRequest is the content of an execute_request.
type ExecuteRequest struct {
	Code            string         `json:"code"`
	Silent          bool           `json:"silent"`
	StoreHistory    bool           `json:"store_history"`
	UserExpressions map[string]any `json:"user_expressions"`
	AllowStdin      bool           `json:"allow_stdin"`
	StopOnError     bool           `json:"stop_on_error"`
}

// ExecuteReply is the content of an execute_reply.
type ExecuteReply struct {
	Status         string   `json:"status"`
	ExecutionCount int      `json:"execution_count"`
	EName          string   `json:"ename,omitempty"`
	EValue         string   `json:"evalue,omitempty"`
	Traceback      []string `json:"traceback,omitempty"`
}

// Execute runs code (stored in history, stop_on_error off so a failing
// cell never aborts the next request) and calls handler, in order, for
// every IOPub message caused by it until the kernel reports idle.
func (k *Kernel) Execute(ctx context.Context, code string, handler func(Message)) (ExecuteReply, error) {
	return k.ExecuteRequest(ctx, ExecuteRequest{Code: code, StoreHistory: true}, handler)
}

// ExecuteRequest is Execute with full control over the request. If ctx
// ends first the kernel is interrupted and the call keeps draining output
// for up to InterruptGrace, then returns ctx's error (or
// ErrInterruptTimeout). If the kernel dies the error wraps ErrKernelDied.
func (k *Kernel) ExecuteRequest(ctx context.Context, req ExecuteRequest, handler func(Message)) (ExecuteReply, error) {
	in := k.current()
	if in.isDead() {
		return ExecuteReply{}, in.deadErr()
	}
	if req.UserExpressions == nil {
		req.UserExpressions = map[string]any{}
	}
	content, err := json.Marshal(req)
	if err != nil {
		return ExecuteReply{}, fmt.Errorf("encode execute_request: %w", err)
	}
	h := newHeader(k.session, "execute_request")
	w := in.register(h.MsgID)
	defer in.unregister(h.MsgID)
	if err := in.send(in.shell, Message{Header: h, Content: content}); err != nil {
		return ExecuteReply{}, err
	}
	return k.await(ctx, in, w, handler)
}

// await waits for the reply and the idle status of one execution.
func (k *Kernel) await(ctx context.Context, in *instance, w *waiter, handler func(Message)) (ExecuteReply, error) {
	var (
		reply     ExecuteReply
		gotReply  bool
		idle      bool
		sawResult bool
		ctxErr    error
		done      = ctx.Done()
		graceTime <-chan time.Time
	)
	for !(gotReply && idle) {
		select {
		case m := <-w.reply:
			gotReply = true
			if err := m.DecodeContent(&reply); err != nil {
				return reply, err
			}
		case <-w.notify:
			for _, m := range w.drain() {
				if handler != nil {
					handler(m)
				}
				if m.Type() == "status" && statusOf(m) == "idle" {
					idle = true
				}
				sawResult = sawResult || m.Type() == "execute_result"
			}
		case <-in.dead:
			return reply, in.deadErr()
		case <-done:
			ctxErr, done = ctx.Err(), nil
			if err := k.Interrupt(context.Background()); err != nil {
				k.log.Warn("interrupt kernel", "err", err)
			}
			t := time.NewTimer(InterruptGrace)
			defer t.Stop()
			graceTime = t.C
		case <-graceTime:
			return reply, fmt.Errorf("%w (after %v: %v)", ErrInterruptTimeout, InterruptGrace, ctxErr)
		}
	}
	if ctxErr != nil {
		return reply, fmt.Errorf("execution interrupted: %w", ctxErr)
	}
	if !sawResult && reply.Status == "ok" && k.spec.LateResultGrace > 0 {
		k.awaitLateResult(w, handler)
	}
	return reply, nil
}

// awaitLateResult forwards messages that arrive within the spec's
// LateResultGrace after idle, stopping at the first execute_result.
func (k *Kernel) awaitLateResult(w *waiter, handler func(Message)) {
	t := time.NewTimer(k.spec.LateResultGrace)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return
		case <-w.notify:
			for _, m := range w.drain() {
				if handler != nil {
					handler(m)
				}
				if m.Type() == "execute_result" {
					return
				}
			}
		}
	}
}

func statusOf(m Message) string {
	var c struct {
		ExecutionState string `json:"execution_state"`
	}
	_ = json.Unmarshal(m.Content, &c)
	return c.ExecutionState
}

// Interrupt interrupts the running execution: SIGINT to the process, or an
// interrupt_request on the control channel when interrupt_mode is message.
func (k *Kernel) Interrupt(ctx context.Context) error {
	in := k.current()
	if in.isDead() {
		return in.deadErr()
	}
	if k.spec.InterruptMode != "message" {
		if err := interruptProcess(in.cmd); err != nil {
			return fmt.Errorf("interrupt kernel: %w", err)
		}
		return nil
	}
	h := newHeader(k.session, "interrupt_request")
	w := in.register(h.MsgID)
	defer in.unregister(h.MsgID)
	if err := in.send(in.control, Message{Header: h}); err != nil {
		return err
	}
	select {
	case <-w.reply:
		return nil
	case <-in.dead:
		return in.deadErr()
	case <-ctx.Done():
		return fmt.Errorf("interrupt kernel: %w", ctx.Err())
	}
}

// Restart stops the kernel process and starts a fresh one; all state is
// lost and pending calls fail with ErrKernelDied.
func (k *Kernel) Restart(ctx context.Context) error {
	k.mu.Lock()
	old := k.cur
	k.mu.Unlock()
	old.teardown(ctx, !old.isDead())
	inst, err := k.launch(ctx)
	if err != nil {
		return fmt.Errorf("restart kernel: %w", err)
	}
	k.mu.Lock()
	k.cur = inst
	k.mu.Unlock()
	return nil
}

// Shutdown asks the kernel to exit, kills it if it does not, and closes
// the channels.
func (k *Kernel) Shutdown(ctx context.Context) error {
	k.current().teardown(ctx, true)
	return nil
}

// Dead returns a channel closed when the current kernel process exits.
func (k *Kernel) Dead() <-chan struct{} { return k.current().dead }

// Alive reports whether the process runs and answers a heartbeat within
// timeout.
func (k *Kernel) Alive(ctx context.Context, timeout time.Duration) bool {
	in := k.current()
	if in.isDead() {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return in.heartbeat(ctx) == nil
}

// heartbeat sends a ping on the REQ socket and waits for the echo.
func (in *instance) heartbeat(ctx context.Context) error {
	if !in.hbMu.TryLock() {
		return errors.New("jupyter: heartbeat in progress")
	}
	errc := make(chan error, 1)
	go func() {
		defer in.hbMu.Unlock()
		ping := []byte(newID())
		if err := in.hb.Send(zmq4.NewMsg(ping)); err != nil {
			errc <- fmt.Errorf("heartbeat send: %w", err)
			return
		}
		msg, err := in.hb.Recv()
		if err != nil {
			errc <- fmt.Errorf("heartbeat recv: %w", err)
			return
		}
		if len(msg.Frames) == 0 || string(msg.Frames[0]) != string(ping) {
			errc <- errors.New("jupyter: heartbeat echo mismatch")
			return
		}
		errc <- nil
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return fmt.Errorf("heartbeat: %w", ctx.Err())
	}
}
