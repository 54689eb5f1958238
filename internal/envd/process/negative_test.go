package process

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"sort"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/moatsh/moat/api/envd/process"
	"github.com/moatsh/moat/api/envd/process/processconnect"
)

func TestNegative(t *testing.T) {
	forEachCodec(t, func(t *testing.T, e *testEnv, c processconnect.ProcessClient) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// A live pipe process without stdin, and a live PTY process.
		pipe, err := c.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "sleep", Args: []string{"60"}}, Stdin: ptr(false)}))
		if err != nil {
			t.Fatal(err)
		}
		defer pipe.Close()
		pipePid, err := readStart(t, pipe)
		if err != nil {
			t.Fatal(err)
		}
		tty, err := c.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "sleep", Args: []string{"60"}}, Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}}}))
		if err != nil {
			t.Fatal(err)
		}
		defer tty.Close()
		ttyPid, err := readStart(t, tty)
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range negativeCases(ctx, c, pipePid, ttyPid) {
			t.Run(tt.name, func(t *testing.T) { wantCode(t, tt.call(), tt.code) })
		}
		// The failed calls left the two processes alone.
		if ps, err := c.List(ctx, connect.NewRequest(&pb.ListRequest{})); err != nil || len(ps.Msg.GetProcesses()) != 2 {
			t.Fatalf("List = %v, %v", ps, err)
		}
	})
}

type negCase struct {
	name string
	call func() error
	code connect.Code
}

// negativeCases are calls that must fail with code; pipePid is a live process
// without stdin, ttyPid a live PTY process.
func negativeCases(ctx context.Context, c processconnect.ProcessClient, pipePid, ttyPid uint32) []negCase {
	stdinIn := &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("x")}}
	ptyIn := &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte("x")}}
	startErr := func(req *pb.StartRequest, hdr ...string) error {
		r := connect.NewRequest(req)
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header().Set(hdr[i], hdr[i+1])
		}
		s, err := c.Start(ctx, r)
		return streamErr(s, err)
	}
	return []negCase{
		{"connect unknown pid", func() error {
			s, err := c.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: pidSel(999999)}))
			return streamErr(s, err)
		}, connect.CodeNotFound},
		{"connect unknown tag", func() error {
			s, err := c.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: tagSel("nope")}))
			return streamErr(s, err)
		}, connect.CodeNotFound},
		{"connect no selector", func() error {
			s, err := c.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{}))
			return streamErr(s, err)
		}, connect.CodeInvalidArgument},
		{"signal unknown pid", func() error {
			_, err := c.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: pidSel(999999), Signal: pb.Signal_SIGNAL_SIGKILL}))
			return err
		}, connect.CodeNotFound},
		{"signal unspecified", func() error {
			_, err := c.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: pidSel(pipePid)}))
			return err
		}, connect.CodeUnimplemented},
		{"signal other number", func() error {
			_, err := c.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: pidSel(pipePid), Signal: pb.Signal(2)}))
			return err
		}, connect.CodeUnimplemented},
		{"signal no selector", func() error {
			_, err := c.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Signal: pb.Signal_SIGNAL_SIGKILL}))
			return err
		}, connect.CodeInvalidArgument},
		{"stdin disabled", func() error {
			_, err := c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: pidSel(pipePid), Input: stdinIn}))
			return err
		}, connect.CodeInternal},
		{"pty input to pipe process", func() error {
			_, err := c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: pidSel(pipePid), Input: ptyIn}))
			return err
		}, connect.CodeInternal},
		{"stdin input to pty process", func() error {
			_, err := c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: pidSel(ttyPid), Input: stdinIn}))
			return err
		}, connect.CodeInternal},
		{"input unknown pid", func() error {
			_, err := c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: pidSel(999999), Input: stdinIn}))
			return err
		}, connect.CodeNotFound},
		{"update non-pty", func() error {
			_, err := c.Update(ctx, connect.NewRequest(&pb.UpdateRequest{Process: pidSel(pipePid), Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 1, Rows: 1}}}))
			return err
		}, connect.CodeInternal},
		{"update no selector", func() error {
			_, err := c.Update(ctx, connect.NewRequest(&pb.UpdateRequest{}))
			return err
		}, connect.CodeInvalidArgument},
		{"close stdin of pty", func() error {
			_, err := c.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: pidSel(ttyPid)}))
			return err
		}, connect.CodeInternal},
		{"close stdin unknown", func() error {
			_, err := c.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: tagSel("nope")}))
			return err
		}, connect.CodeNotFound},
		{"start missing config", func() error { return startErr(&pb.StartRequest{}) }, connect.CodeInvalidArgument},
		{"start missing cwd", func() error {
			return startErr(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "true", Cwd: ptr("/does/not/exist")}})
		}, connect.CodeInvalidArgument},
		{"start nonexistent cmd", func() error {
			return startErr(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "no-such-command-moat"}})
		}, connect.CodeInternal},
		{"start nonexistent absolute cmd", func() error {
			return startErr(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/no/such/binary"}})
		}, connect.CodeInternal},
		{"start unknown user", func() error {
			return startErr(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "true"}},
				"Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("no-such-user-moat:")))
		}, connect.CodeUnauthenticated},
		{"stream input data before start", func() error {
			in := c.StreamInput(ctx)
			_ = in.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: stdinIn}}})
			_, err := in.CloseAndReceive()
			return err
		}, connect.CodeInvalidArgument},
	}
}

func envelope(flag byte, payload []byte) []byte {
	b := make([]byte, 5, 5+len(payload))
	b[0] = flag
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

// TestRawSDKFrame posts the exact frame the E2B JS SDK sends for
// commands.run("echo hi") and checks the envelopes that come back.
func TestRawSDKFrame(t *testing.T) {
	e := newTestEnv(t, nil)
	body := envelope(0, []byte(`{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"]},"stdin":false}`))
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/process.Process/Start", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Keepalive-Ping-Interval", "50")
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	type frame struct {
		flag byte
		msg  map[string]any
	}
	var frames []frame
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(resp.Body, hdr[:]); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		payload := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(resp.Body, payload); err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(payload, &m); err != nil {
			t.Fatalf("frame %q: %v", payload, err)
		}
		frames = append(frames, frame{hdr[0], m})
	}
	if len(frames) != 4 {
		t.Fatalf("got %d frames: %v", len(frames), frames)
	}
	start, ok := frames[0].msg["event"].(map[string]any)["start"].(map[string]any)
	if !ok || frames[0].flag != 0 || start["pid"].(float64) <= 0 {
		t.Fatalf("frame 0 = %v", frames[0])
	}
	want := []frame{
		{0, map[string]any{"event": map[string]any{"data": map[string]any{"stdout": "aGkK"}}}},
		{0, map[string]any{"event": map[string]any{"end": map[string]any{"exited": true, "status": "exit status 0"}}}},
		{2, map[string]any{}},
	}
	for i, w := range want {
		if got := frames[i+1]; got.flag != w.flag || !reflect.DeepEqual(got.msg, w.msg) {
			t.Errorf("frame %d = %d %v, want %d %v", i+1, got.flag, got.msg, w.flag, w.msg)
		}
	}
}

// BenchmarkStartTrue measures a Start("true") round trip, start to end of
// stream, and reports the median.
func BenchmarkStartTrue(b *testing.B) {
	e := newTestEnv(b, nil)
	c := e.client(false)
	ctx := context.Background()
	req := &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "true"}, Stdin: ptr(false)}
	durs := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		s, err := c.Start(ctx, connect.NewRequest(req))
		if err != nil {
			b.Fatal(err)
		}
		var end bool
		for s.Receive() {
			end = end || s.Msg().GetEvent().GetEnd() != nil
		}
		if s.Err() != nil || !end {
			b.Fatalf("stream: end %v, %v", end, s.Err())
		}
		s.Close()
		durs = append(durs, time.Since(t0))
	}
	b.StopTimer()
	sort.Slice(durs, func(i, j int) bool { return durs[i] < durs[j] })
	b.ReportMetric(float64(durs[len(durs)/2].Microseconds())/1000, "median-ms")
}
