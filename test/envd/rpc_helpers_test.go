package envd_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	procpb "github.com/moatsh/moat/api/envd/process"
)

// rpcTimeout bounds every single RPC of the RPCAll tests.
const rpcTimeout = 20 * time.Second

// callCtx returns a context that expires after rpcTimeout and is cancelled
// when the test ends.
func callCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	t.Cleanup(cancel)
	return ctx
}

// headerRT adds fixed headers to every request.
type headerRT struct {
	base http.RoundTripper
	hdr  map[string]string
}

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.hdr {
		r.Header.Set(k, v)
	}
	return h.base.RoundTrip(r)
}

// rpcClient returns an HTTP client that sends hdr with every request; h2c
// selects unencrypted HTTP/2 instead of HTTP/1.1.
func rpcClient(t testing.TB, h2c bool, hdr map[string]string) *http.Client {
	t.Helper()
	tr := &http.Transport{DisableCompression: true}
	if h2c {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = &p
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: headerRT{base: tr, hdr: hdr}}
}

// procResult is what one Start or Connect stream delivered.
type procResult struct {
	pid    uint32
	stdout bytes.Buffer
	stderr bytes.Buffer
	pty    bytes.Buffer
	end    *procpb.ProcessEvent_EndEvent
	err    error
}

type procEventMsg interface {
	GetEvent() *procpb.ProcessEvent
}

type procEventStream[T procEventMsg] interface {
	Receive() bool
	Msg() T
	Err() error
}

// firstPid reads up to the start event and returns its pid.
func firstPid[T procEventMsg](s procEventStream[T]) (uint32, error) {
	for s.Receive() {
		if st := s.Msg().GetEvent().GetStart(); st != nil {
			return st.GetPid(), nil
		}
	}
	if s.Err() != nil {
		return 0, s.Err()
	}
	return 0, errors.New("stream ended without a start event")
}

// drainProc reads the rest of a process stream into r.
func drainProc[T procEventMsg](s procEventStream[T], r *procResult) {
	for s.Receive() {
		ev := s.Msg().GetEvent()
		switch {
		case ev.GetStart() != nil:
			r.pid = ev.GetStart().GetPid()
		case ev.GetData() != nil:
			r.stdout.Write(ev.GetData().GetStdout())
			r.stderr.Write(ev.GetData().GetStderr())
			r.pty.Write(ev.GetData().GetPty())
		case ev.GetEnd() != nil:
			r.end = ev.GetEnd()
		}
	}
	r.err = s.Err()
	if r.err == nil && r.end == nil {
		r.err = errors.New("stream ended without an end event")
	}
}

// drainAsync drains s in the background; the channel yields the result.
func drainAsync[T procEventMsg](s procEventStream[T], pid uint32) <-chan *procResult {
	ch := make(chan *procResult, 1)
	go func() {
		r := &procResult{pid: pid}
		drainProc(s, r)
		ch <- r
	}()
	return ch
}

// awaitResult waits for a drainAsync result, at most rpcTimeout.
func awaitResult(t testing.TB, ch <-chan *procResult) *procResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(rpcTimeout):
		t.Fatal("timed out waiting for a process stream to end")
	}
	return nil
}

// firstStreamErr returns the error of a server-streaming call, from the call
// itself or from receiving; nil when the stream ends cleanly.
func firstStreamErr(s interface {
	Receive() bool
	Err() error
	Close() error
}, err error) error {
	if err != nil {
		return err
	}
	defer s.Close()
	for s.Receive() {
	}
	return s.Err()
}

// checkCode fails unless err has code want; want 0 means success.
func checkCode(t testing.TB, err error, want connect.Code) {
	t.Helper()
	if want == 0 {
		if err != nil {
			t.Fatalf("want success, got %v (code %v)", err, connect.CodeOf(err))
		}
		return
	}
	if err == nil {
		t.Fatalf("want code %v, got success", want)
	}
	if got := connect.CodeOf(err); got != want {
		t.Fatalf("want code %v, got %v (%v)", want, got, err)
	}
}

func procPid(pid uint32) *procpb.ProcessSelector {
	return &procpb.ProcessSelector{Selector: &procpb.ProcessSelector_Pid{Pid: pid}}
}
