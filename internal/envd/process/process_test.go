package process

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/moatsh/moat/api/envd/process"
	"github.com/moatsh/moat/api/envd/process/processconnect"
	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/testkit"
)

func TestStartOutputAndExit(t *testing.T) {
	tests := []struct {
		name       string
		script     string
		stdout     string
		stderr     string
		exitCode   int32
		exited     bool
		status     string
		wantErrMsg bool
	}{
		{name: "echo", script: "echo hi", stdout: "hi\n", exited: true, status: "exit status 0"},
		{name: "exit code", script: "exit 3", exitCode: 3, exited: true, status: "exit status 3", wantErrMsg: true},
		{name: "stderr", script: "echo oops >&2; exit 1", stderr: "oops\n", exitCode: 1, exited: true, status: "exit status 1", wantErrMsg: true},
		{name: "signalled", script: "kill -KILL $$", exitCode: -1, exited: false, status: "signal: killed", wantErrMsg: true},
	}
	forEachCodec(t, func(t *testing.T, e *testEnv, c processconnect.ProcessClient) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := run(t, c, shReq(tt.script))
				if r.pid == 0 {
					t.Error("pid 0")
				}
				if got := r.stdout.String(); got != tt.stdout {
					t.Errorf("stdout %q, want %q", got, tt.stdout)
				}
				if got := r.stderr.String(); got != tt.stderr {
					t.Errorf("stderr %q, want %q", got, tt.stderr)
				}
				end := r.end
				if end.GetExitCode() != tt.exitCode || end.GetExited() != tt.exited || end.GetStatus() != tt.status {
					t.Errorf("end = %v, want code %d exited %v status %q", end, tt.exitCode, tt.exited, tt.status)
				}
				if (end.Error != nil) != tt.wantErrMsg {
					t.Errorf("end.error = %v, want present=%v", end.Error, tt.wantErrMsg)
				}
				if tt.wantErrMsg && end.GetError() != tt.status {
					t.Errorf("end.error = %q, want %q", end.GetError(), tt.status)
				}
			})
		}
	})
}

func TestEnvMergeAndCwd(t *testing.T) {
	forEachCodec(t, func(t *testing.T, e *testEnv, c processconnect.ProcessClient) {
		e.st.Apply(state.Init{EnvVars: map[string]string{"G1": "global", "G2": "global"}})
		if err := os.Mkdir(filepath.Join(e.home, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		wd := t.TempDir()
		tests := []struct {
			name  string
			cfg   *pb.ProcessConfig
			setWD string
			want  string
		}{
			{name: "env order", cfg: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", `echo "$G1 $G2 $R $USER $LOGNAME $HOME"; test -n "$PATH"`},
				Envs: map[string]string{"G2": "request", "R": "r"}},
				want: fmt.Sprintf("global request r root root %s\n", e.home)},
			{name: "cwd default home", cfg: &pb.ProcessConfig{Cmd: "pwd"}, want: e.home + "\n"},
			{name: "cwd relative to home", cfg: &pb.ProcessConfig{Cmd: "pwd", Cwd: ptr("sub")}, want: filepath.Join(e.home, "sub") + "\n"},
			{name: "cwd absolute", cfg: &pb.ProcessConfig{Cmd: "pwd", Cwd: ptr(wd)}, want: wd + "\n"},
			{name: "cwd default workdir", cfg: &pb.ProcessConfig{Cmd: "pwd"}, setWD: wd, want: wd + "\n"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if tt.setWD != "" {
					e.st.Apply(state.Init{DefaultWorkdir: tt.setWD})
				}
				r := run(t, c, &pb.StartRequest{Process: tt.cfg})
				if got := r.stdout.String(); got != tt.want || r.end.GetExitCode() != 0 {
					t.Errorf("stdout %q (end %v), want %q; stderr %q", got, r.end, tt.want, r.stderr.String())
				}
			})
		}
	})
}

func TestLargeOutputInOrder(t *testing.T) {
	var want strings.Builder
	for i := 1; i <= 60000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	forEachCodec(t, func(t *testing.T, e *testEnv, c processconnect.ProcessClient) {
		r := run(t, c, shReq("seq 1 60000; seq 1 1000 >&2"))
		if r.stdout.Len() < 300_000 || r.stdout.String() != want.String() {
			t.Fatalf("stdout: %d bytes, want %d identical bytes", r.stdout.Len(), want.Len())
		}
		if !strings.HasSuffix(r.stderr.String(), "\n1000\n") {
			t.Fatalf("stderr incomplete: %d bytes", r.stderr.Len())
		}
	})
}

func TestReattachInputAndRetainedEnd(t *testing.T) {
	forEachCodec(t, func(t *testing.T, e *testEnv, c processconnect.ProcessClient) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Start cat in the background, then disconnect: it must survive.
		sctx, scancel := context.WithCancel(ctx)
		start, err := c.Start(sctx, connect.NewRequest(&pb.StartRequest{
			Process: &pb.ProcessConfig{Cmd: "cat"}, Tag: ptr("bg-cat"), Stdin: ptr(true)}))
		if err != nil {
			t.Fatal(err)
		}
		pid, err := readStart(t, start)
		if err != nil {
			t.Fatal(err)
		}
		scancel()
		start.Close()

		list, err := c.List(ctx, connect.NewRequest(&pb.ListRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if ps := list.Msg.GetProcesses(); len(ps) != 1 || ps[0].GetPid() != pid || ps[0].GetTag() != "bg-cat" || ps[0].GetConfig().GetCmd() != "cat" {
			t.Fatalf("List = %v", ps)
		}

		byTag, err := c.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: tagSel("bg-cat")}))
		if err != nil {
			t.Fatal(err)
		}
		defer byTag.Close()
		if got, err := readStart(t, byTag); err != nil || got != pid {
			t.Fatalf("Connect by tag: pid %d, %v; want %d", got, err, pid)
		}
		byPid, err := c.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: pidSel(pid)}))
		if err != nil {
			t.Fatal(err)
		}
		defer byPid.Close()
		if got, err := readStart(t, byPid); err != nil || got != pid {
			t.Fatalf("Connect by pid: pid %d, %v; want %d", got, err, pid)
		}

		in := &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("hello\n")}}
		if _, err := c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: pidSel(pid), Input: in})); err != nil {
			t.Fatal(err)
		}
		for _, sel := range []*pb.ProcessSelector{pidSel(pid), pidSel(pid), tagSel("bg-cat")} { // idempotent
			if _, err := c.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: sel})); err != nil && connect.CodeOf(err) != connect.CodeNotFound {
				t.Fatal(err)
			}
		}
		for name, s := range map[string]eventStream[*pb.ConnectResponse]{"tag": byTag, "pid": byPid} {
			r := &result{}
			if err := collectRest(t, s, r); err != nil {
				t.Fatal(err)
			}
			if r.stdout.String() != "hello\n" || r.end.GetStatus() != "exit status 0" {
				t.Errorf("Connect by %s: stdout %q end %v", name, r.stdout.String(), r.end)
			}
		}

		// Ended: Connect returns start + retained end; List and signals no longer see it.
		again, err := c.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: pidSel(pid)}))
		if err != nil {
			t.Fatal(err)
		}
		defer again.Close()
		r, err := collect(t, again)
		if err != nil || r.pid != pid || r.end.GetStatus() != "exit status 0" || !r.end.GetExited() {
			t.Fatalf("retained Connect: %v %v", r, err)
		}
		list, err = c.List(ctx, connect.NewRequest(&pb.ListRequest{}))
		if err != nil || len(list.Msg.GetProcesses()) != 0 {
			t.Fatalf("List after end = %v, %v", list, err)
		}
		_, err = c.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: pidSel(pid), Signal: pb.Signal_SIGNAL_SIGKILL}))
		wantCode(t, err, connect.CodeNotFound)
	})
}

func TestStreamInput(t *testing.T) {
	e := newTestEnv(t, nil)
	c := e.client(false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start, err := c.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "cat"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer start.Close()
	pid, err := readStart(t, start)
	if err != nil {
		t.Fatal(err)
	}
	in := c.StreamInput(ctx)
	msgs := []*pb.StreamInputRequest{
		{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: pidSel(pid)}}},
		{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("a")}}}}},
		{Event: &pb.StreamInputRequest_Keepalive{Keepalive: &pb.StreamInputRequest_KeepAlive{}}},
		{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("b\n")}}}}},
	}
	for _, m := range msgs {
		if err := in.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := in.CloseAndReceive(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: pidSel(pid)})); err != nil {
		t.Fatal(err)
	}
	r := &result{}
	if err := collectRest(t, start, r); err != nil {
		t.Fatal(err)
	}
	if r.stdout.String() != "ab\n" {
		t.Fatalf("stdout %q", r.stdout.String())
	}
}

func TestPTY(t *testing.T) {
	forEachCodec(t, func(t *testing.T, e *testEnv, c processconnect.ProcessClient) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r := run(t, c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "stty", Args: []string{"size"}},
			Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 33, Rows: 11}}})
		if got := strings.TrimSpace(r.pty.String()); got != "11 33" {
			t.Fatalf("initial size %q, want \"11 33\"", got)
		}

		s, err := c.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh"},
			Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}}}))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		pid, err := readStart(t, s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Update(ctx, connect.NewRequest(&pb.UpdateRequest{Process: pidSel(pid),
			Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 120, Rows: 40}}})); err != nil {
			t.Fatal(err)
		}
		in := &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte("stty size; exit 7\n")}}
		if _, err := c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: pidSel(pid), Input: in})); err != nil {
			t.Fatal(err)
		}
		r = &result{}
		if err := collectRest(t, s, r); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(r.pty.String(), "40 120") || r.end.GetExitCode() != 7 {
			t.Fatalf("pty output %q, end %v; want \"40 120\" and exit 7", r.pty.String(), r.end)
		}
		if r.stdout.Len() != 0 || r.stderr.Len() != 0 {
			t.Fatalf("stdout/stderr events from a pty process")
		}
	})
}

func TestSendSignal(t *testing.T) {
	tests := []struct {
		name   string
		sig    pb.Signal
		status string
	}{
		{"SIGTERM", pb.Signal_SIGNAL_SIGTERM, "signal: terminated"},
		{"SIGKILL", pb.Signal_SIGNAL_SIGKILL, "signal: killed"},
	}
	forEachCodec(t, func(t *testing.T, e *testEnv, c processconnect.ProcessClient) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				s, err := c.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "sleep", Args: []string{"60"}}}))
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				pid, err := readStart(t, s)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: pidSel(pid), Signal: tt.sig})); err != nil {
					t.Fatal(err)
				}
				r := &result{}
				if err := collectRest(t, s, r); err != nil {
					t.Fatal(err)
				}
				if r.end.GetExitCode() != -1 || r.end.GetExited() || r.end.GetStatus() != tt.status {
					t.Fatalf("end %v, want -1 / not exited / %q", r.end, tt.status)
				}
			})
		}
	})
}

func TestTimeoutKillsButDisconnectDoesNot(t *testing.T) {
	forEachCodec(t, func(t *testing.T, e *testEnv, c processconnect.ProcessClient) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// The client deadline travels as Connect-Timeout-Ms and bounds the process.
		tctx, tcancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer tcancel()
		s, err := c.Start(tctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "sleep", Args: []string{"60"}}}))
		if err != nil {
			t.Fatal(err)
		}
		pid, err := readStart(t, s)
		if err != nil {
			t.Fatal(err)
		}
		r := &result{}
		wantCode(t, collectRest(t, s, r), connect.CodeDeadlineExceeded)
		s.Close()
		testkit.WaitFor(t, 10*time.Second, "timed-out process to be killed", func() bool { return pidEnded(ctx, c, pid) == "signal: killed" })

		// A plain disconnect leaves the process running.
		dctx, dcancel := context.WithCancel(ctx)
		s2, err := c.Start(dctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "sleep", Args: []string{"60"}}}))
		if err != nil {
			t.Fatal(err)
		}
		pid2, err := readStart(t, s2)
		if err != nil {
			t.Fatal(err)
		}
		dcancel()
		s2.Close()
		time.Sleep(300 * time.Millisecond) // a negative check: give a wrong kill time to happen
		if st := pidEnded(ctx, c, pid2); st != "" {
			t.Fatalf("process ended after disconnect: %q", st)
		}
	})
}

// pidEnded returns the end status of pid, or "" while it is running.
func pidEnded(ctx context.Context, c processconnect.ProcessClient, pid uint32) string {
	list, err := c.List(ctx, connect.NewRequest(&pb.ListRequest{}))
	if err != nil {
		return "error: " + err.Error()
	}
	for _, p := range list.Msg.GetProcesses() {
		if p.GetPid() == pid {
			return ""
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := c.Connect(cctx, connect.NewRequest(&pb.ConnectRequest{Process: pidSel(pid)}))
	if err != nil {
		return "error: " + err.Error()
	}
	defer s.Close()
	for s.Receive() {
		if end := s.Msg().GetEvent().GetEnd(); end != nil {
			return end.GetStatus()
		}
	}
	return fmt.Sprintf("error: %v", s.Err())
}

func TestKeepalive(t *testing.T) {
	forEachCodec(t, func(t *testing.T, e *testEnv, c processconnect.ProcessClient) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req := connect.NewRequest(shReq("sleep 2.5; echo done"))
		req.Header().Set("Keepalive-Ping-Interval", "1")
		s, err := c.Start(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		r, err := collect(t, s)
		if err != nil {
			t.Fatal(err)
		}
		if r.keepalives < 1 || r.stdout.String() != "done\n" {
			t.Fatalf("keepalives %d, stdout %q", r.keepalives, r.stdout.String())
		}
	})
}

func TestBackgroundChildren(t *testing.T) {
	forEachCodec(t, func(t *testing.T, e *testEnv, c processconnect.ProcessClient) {
		// A child that keeps stdout open must not delay the end event: the
		// child (its PID on stderr) is still running when the end arrives.
		r := run(t, c, shReq("echo before; sleep 30 & echo $! >&2; echo after"))
		child, err := strconv.Atoi(strings.TrimSpace(r.stderr.String()))
		if err != nil || r.stdout.String() != "before\nafter\n" || r.end.GetStatus() != "exit status 0" {
			t.Fatalf("stdout %q, stderr %q, end %v", r.stdout.String(), r.stderr.String(), r.end)
		}
		if err := syscall.Kill(child, 0); err != nil {
			t.Fatalf("the end event waited for the background child %d to end (kill 0: %v)", child, err)
		}
		_ = syscall.Kill(child, syscall.SIGKILL)

		// SIGKILL reaches the whole process group.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := c.Start(ctx, connect.NewRequest(shReq("sleep 60 & sleep 60 & wait")))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		pid, err := readStart(t, s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: pidSel(pid), Signal: pb.Signal_SIGNAL_SIGKILL})); err != nil {
			t.Fatal(err)
		}
		r = &result{}
		if err := collectRest(t, s, r); err != nil {
			t.Fatal(err)
		}
		if r.end.GetStatus() != "signal: killed" {
			t.Fatalf("end %v", r.end)
		}
		testkit.WaitFor(t, 10*time.Second, "process group to die", func() bool {
			return syscall.Kill(-int(pid), 0) == syscall.ESRCH
		})
	})
}

// TestSlowReaderLosesNoOutput stretches the window between a read and its
// publish (a reader descheduled under load): the output must still arrive
// before the end event, not be dropped as a surviving child's late output.
func TestSlowReaderLosesNoOutput(t *testing.T) {
	testHookRead = func() { time.Sleep(150 * time.Millisecond) }
	t.Cleanup(func() { testHookRead = nil })
	c := newTestEnv(t, nil).client(false)
	for i := range 3 {
		r := run(t, c, shReq("echo one; echo two >&2; /bin/echo three"))
		if r.stdout.String() != "one\nthree\n" || r.stderr.String() != "two\n" {
			t.Fatalf("round %d: stdout %q stderr %q, want %q and %q", i, r.stdout.String(), r.stderr.String(), "one\nthree\n", "two\n")
		}
	}
}
