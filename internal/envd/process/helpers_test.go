package process

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/moatsh/moat/api/envd/process"
	"github.com/moatsh/moat/api/envd/process/processconnect"
	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/envd/users"
)

type testEnv struct {
	svc  *Service
	srv  *httptest.Server
	st   *state.State
	home string
}

func newTestEnv(tb testing.TB, internal map[string]string) *testEnv {
	tb.Helper()
	home := tb.TempDir()
	st := state.New(internal)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := NewService(st, users.NewHostResolver(home), log)
	mux := http.NewServeMux()
	mux.Handle(svc.Handler())
	srv := httptest.NewServer(mux)
	tb.Cleanup(func() {
		svc.Close()
		srv.Close()
	})
	return &testEnv{svc: svc, srv: srv, st: st, home: home}
}

func (e *testEnv) client(json bool) processconnect.ProcessClient {
	var opts []connect.ClientOption
	if json {
		opts = append(opts, connect.WithProtoJSON())
	}
	return processconnect.NewProcessClient(e.srv.Client(), e.srv.URL, opts...)
}

// forEachCodec runs fn against a fresh server with the binary and the JSON
// codec.
func forEachCodec(t *testing.T, fn func(t *testing.T, e *testEnv, c processconnect.ProcessClient)) {
	t.Helper()
	for _, codec := range []struct {
		name string
		json bool
	}{{"proto", false}, {"json", true}} {
		t.Run(codec.name, func(t *testing.T) {
			e := newTestEnv(t, nil)
			fn(t, e, e.client(codec.json))
		})
	}
}

// result is everything one Start or Connect stream delivered.
type result struct {
	pid        uint32
	stdout     bytes.Buffer
	stderr     bytes.Buffer
	pty        bytes.Buffer
	end        *pb.ProcessEvent_EndEvent
	keepalives int
}

type eventMsg interface{ GetEvent() *pb.ProcessEvent }

type eventStream[T eventMsg] interface {
	Receive() bool
	Msg() T
	Err() error
}

// readStart reads the first message, which must be start.
func readStart[T eventMsg](t *testing.T, s eventStream[T]) (uint32, error) {
	t.Helper()
	if !s.Receive() {
		if s.Err() == nil {
			t.Fatal("stream ended without a start event")
		}
		return 0, s.Err()
	}
	st := s.Msg().GetEvent().GetStart()
	if st == nil {
		t.Fatalf("first event is not start: %v", s.Msg().GetEvent())
	}
	return st.GetPid(), nil
}

// collectRest reads events after start until the stream ends.
func collectRest[T eventMsg](t *testing.T, s eventStream[T], r *result) error {
	t.Helper()
	for s.Receive() {
		ev := s.Msg().GetEvent()
		if r.end != nil {
			t.Fatalf("event after end: %v", ev)
		}
		switch {
		case ev.GetStart() != nil:
			t.Fatalf("second start event")
		case ev.GetData() != nil:
			d := ev.GetData()
			r.stdout.Write(d.GetStdout())
			r.stderr.Write(d.GetStderr())
			r.pty.Write(d.GetPty())
		case ev.GetEnd() != nil:
			r.end = ev.GetEnd()
		case ev.GetKeepalive() != nil:
			r.keepalives++
		default:
			t.Fatalf("empty event")
		}
	}
	if s.Err() != nil {
		return s.Err()
	}
	if r.end == nil {
		t.Fatal("stream ended without an end event")
	}
	return nil
}

func collect[T eventMsg](t *testing.T, s eventStream[T]) (*result, error) {
	t.Helper()
	r := &result{}
	pid, err := readStart(t, s)
	if err != nil {
		return nil, err
	}
	r.pid = pid
	return r, collectRest(t, s, r)
}

func shReq(script string) *pb.StartRequest {
	return &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}}, Stdin: ptr(false)}
}

func ptr[T any](v T) *T { return &v }

// run starts req and collects the whole stream.
func run(t *testing.T, c processconnect.ProcessClient, req *pb.StartRequest) *result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := c.Start(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer s.Close()
	r, err := collect(t, s)
	if err != nil {
		t.Fatalf("Start stream: %v", err)
	}
	return r
}

func wantCode(t *testing.T, err error, code connect.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("want error %v, got nil", code)
	}
	if got := connect.CodeOf(err); got != code {
		t.Fatalf("want code %v, got %v (%v)", code, got, err)
	}
}

func pidSel(pid uint32) *pb.ProcessSelector {
	return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
}

func tagSel(tag string) *pb.ProcessSelector {
	return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: tag}}
}

// streamErr returns the first error of a stream call, whether from the call
// or from the first Receive.
func streamErr(s interface {
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
	if s.Err() == nil {
		return errors.New("stream ended without error")
	}
	return s.Err()
}
