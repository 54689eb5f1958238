package envd_test

import (
	"context"
	"encoding/base64"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/moatsh/moat/api/envd/filesystem"
	"github.com/moatsh/moat/api/envd/filesystem/filesystemconnect"
	procpb "github.com/moatsh/moat/api/envd/process"
	"github.com/moatsh/moat/api/envd/process/processconnect"
	"github.com/moatsh/moat/internal/envd/envdtest"
	"github.com/moatsh/moat/internal/envd/state"
)

// The RPCAll tests call every RPC of process.Process and
// filesystem.Filesystem through the generated clients against one real envd
// per top-level test, in both codecs, with at least one positive and one
// negative case per RPC. An access token is set, so every call but the
// "no token" ones carries X-Access-Token.

const rpcToken = "tok"

var rpcCodecs = []struct {
	name string
	opts []connect.ClientOption
}{
	{"proto", nil},
	{"json", []connect.ClientOption{connect.WithProtoJSON()}},
}

var processProcedures = []string{
	processconnect.ProcessListProcedure,
	processconnect.ProcessConnectProcedure,
	processconnect.ProcessStartProcedure,
	processconnect.ProcessUpdateProcedure,
	processconnect.ProcessStreamInputProcedure,
	processconnect.ProcessSendInputProcedure,
	processconnect.ProcessSendSignalProcedure,
	processconnect.ProcessCloseStdinProcedure,
}

var filesystemProcedures = []string{
	filesystemconnect.FilesystemStatProcedure,
	filesystemconnect.FilesystemMakeDirProcedure,
	filesystemconnect.FilesystemMoveProcedure,
	filesystemconnect.FilesystemListDirProcedure,
	filesystemconnect.FilesystemRemoveProcedure,
	filesystemconnect.FilesystemWatchDirProcedure,
	filesystemconnect.FilesystemCreateWatcherProcedure,
	filesystemconnect.FilesystemGetWatcherEventsProcedure,
	filesystemconnect.FilesystemRemoveWatcherProcedure,
}

// rpcCase is one call; want 0 means it must succeed. Cases of a table run in
// order and may depend on earlier ones.
type rpcCase struct {
	rpc  string
	name string
	want connect.Code
	call func(t *testing.T, ctx context.Context) error
}

func runRPCCases(t *testing.T, cases []rpcCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(path.Base(c.rpc)+"/"+c.name, func(t *testing.T) {
			checkCode(t, c.call(t, callCtx(t)), c.want)
		})
	}
}

// checkRPCCoverage fails unless every procedure has a positive and a
// negative case.
func checkRPCCoverage(t *testing.T, procedures []string, cases []rpcCase) {
	t.Helper()
	pos, neg := map[string]bool{}, map[string]bool{}
	for _, c := range cases {
		if c.want == 0 {
			pos[c.rpc] = true
		} else {
			neg[c.rpc] = true
		}
	}
	for _, p := range procedures {
		if !pos[p] || !neg[p] {
			t.Errorf("%s: positive case %v, negative case %v", p, pos[p], neg[p])
		}
	}
}

// unknownUser is an Authorization header naming a user that does not exist.
var unknownUser = "Basic " + base64.StdEncoding.EncodeToString([]byte("nosuchuser:"))

func startRPCEnvd(t *testing.T) *envdtest.Envd {
	t.Helper()
	e := envdtest.Start(t)
	e.Init(t, state.Init{AccessToken: ptr(rpcToken)})
	return e
}

func TestRPCAllProcess(t *testing.T) {
	e := startRPCEnvd(t)
	for _, codec := range rpcCodecs {
		t.Run(codec.name, func(t *testing.T) {
			pc := processconnect.NewProcessClient(rpcClient(t, false, map[string]string{"X-Access-Token": rpcToken}), e.URL, codec.opts...)
			bare := processconnect.NewProcessClient(rpcClient(t, false, nil), e.URL, codec.opts...)
			// StreamInput is client streaming: it also runs over h2c.
			h2 := processconnect.NewProcessClient(rpcClient(t, true, map[string]string{"X-Access-Token": rpcToken}), e.URL, codec.opts...)
			cases := processCases(t, codec.name, pc, bare, h2)
			checkRPCCoverage(t, processProcedures, cases)
			runRPCCases(t, cases)
			// Nothing started here is left running.
			ps, err := pc.List(callCtx(t), connect.NewRequest(&procpb.ListRequest{}))
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range ps.Msg.GetProcesses() {
				if strings.HasSuffix(p.GetTag(), "-"+codec.name) {
					t.Errorf("process still listed: %v", p)
				}
			}
		})
	}
}

func processCases(t *testing.T, codec string, pc, bare, h2 processconnect.ProcessClient) []rpcCase {
	const unknownPid = 999999
	// Long-lived streams outlive a single case but not rpcTimeout.
	longCtx := callCtx(t)
	outer := t // long-lived streams are closed when the codec's test ends
	var (
		catPid, sleepPid, ptyPid uint32
		catRes, connRes          <-chan *procResult
		sleepRes, ptyRes         <-chan *procResult
	)
	stdin := func(s string) *procpb.ProcessInput {
		return &procpb.ProcessInput{Input: &procpb.ProcessInput_Stdin{Stdin: []byte(s)}}
	}
	startBg := func(req *procpb.StartRequest) (uint32, <-chan *procResult, error) {
		s, err := pc.Start(longCtx, connect.NewRequest(req))
		if err != nil {
			return 0, nil, err
		}
		outer.Cleanup(func() { s.Close() })
		pid, err := firstPid(s)
		if err != nil {
			return 0, nil, err
		}
		return pid, drainAsync(s, pid), nil
	}
	startErr := func(ctx context.Context, c processconnect.ProcessClient, req *procpb.StartRequest, hdr ...string) error {
		r := connect.NewRequest(req)
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header().Set(hdr[i], hdr[i+1])
		}
		s, err := c.Start(ctx, r)
		return firstStreamErr(s, err)
	}
	streamInput := func(ctx context.Context, c processconnect.ProcessClient, msgs ...*procpb.StreamInputRequest) error {
		s := c.StreamInput(ctx)
		for _, m := range msgs {
			if err := s.Send(m); err != nil {
				break // the error is reported by CloseAndReceive
			}
		}
		_, err := s.CloseAndReceive()
		return err
	}
	siStart := func(pid uint32) *procpb.StreamInputRequest {
		return &procpb.StreamInputRequest{Event: &procpb.StreamInputRequest_Start{Start: &procpb.StreamInputRequest_StartEvent{Process: procPid(pid)}}}
	}
	siData := func(s string) *procpb.StreamInputRequest {
		return &procpb.StreamInputRequest{Event: &procpb.StreamInputRequest_Data{Data: &procpb.StreamInputRequest_DataEvent{Input: stdin(s)}}}
	}
	// streamInputRoundTrip starts cat, feeds it through StreamInput on c
	// and checks the echo.
	streamInputRoundTrip := func(t *testing.T, ctx context.Context, c processconnect.ProcessClient, tag string) error {
		pid, res, err := startBg(&procpb.StartRequest{Process: &procpb.ProcessConfig{Cmd: "cat"}, Stdin: ptr(true), Tag: ptr(tag + "-" + codec)})
		if err != nil {
			t.Fatalf("Start cat: %v", err)
		}
		if err := streamInput(ctx, c, siStart(pid), siData("stream"), siData("ed\n")); err != nil {
			return err
		}
		if _, err := pc.CloseStdin(ctx, connect.NewRequest(&procpb.CloseStdinRequest{Process: procPid(pid)})); err != nil {
			t.Fatalf("CloseStdin: %v", err)
		}
		r := awaitResult(t, res)
		if r.err != nil || r.stdout.String() != "streamed\n" || r.end.GetExitCode() != 0 || !r.end.GetExited() {
			t.Fatalf("cat via StreamInput: out %q end %v err %v", r.stdout.String(), r.end, r.err)
		}
		return nil
	}

	const (
		list     = processconnect.ProcessListProcedure
		conn     = processconnect.ProcessConnectProcedure
		start    = processconnect.ProcessStartProcedure
		update   = processconnect.ProcessUpdateProcedure
		sinput   = processconnect.ProcessStreamInputProcedure
		input    = processconnect.ProcessSendInputProcedure
		signal   = processconnect.ProcessSendSignalProcedure
		closeStd = processconnect.ProcessCloseStdinProcedure
	)
	ok := connect.Code(0)
	return []rpcCase{
		// Positive.
		{start, "echo stdout and stderr", ok, func(t *testing.T, ctx context.Context) error {
			s, err := pc.Start(ctx, connect.NewRequest(&procpb.StartRequest{
				Process: &procpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo hi; echo err >&2"}}, Stdin: ptr(false)}))
			if err != nil {
				return err
			}
			defer s.Close()
			r := &procResult{}
			drainProc(s, r)
			if r.err != nil {
				return r.err
			}
			if r.pid == 0 || r.stdout.String() != "hi\n" || r.stderr.String() != "err\n" || r.end.GetExitCode() != 0 || !r.end.GetExited() {
				t.Fatalf("pid %d stdout %q stderr %q end %v", r.pid, r.stdout.String(), r.stderr.String(), r.end)
			}
			return nil
		}},
		{start, "background cat with stdin", ok, func(t *testing.T, ctx context.Context) (err error) {
			catPid, catRes, err = startBg(&procpb.StartRequest{Process: &procpb.ProcessConfig{Cmd: "cat"}, Stdin: ptr(true), Tag: ptr("cat-" + codec)})
			return err
		}},
		{list, "shows running cat", ok, func(t *testing.T, ctx context.Context) error {
			res, err := pc.List(ctx, connect.NewRequest(&procpb.ListRequest{}))
			if err != nil {
				return err
			}
			for _, p := range res.Msg.GetProcesses() {
				if p.GetPid() == catPid {
					if p.GetTag() != "cat-"+codec || p.GetConfig().GetCmd() != "cat" {
						t.Fatalf("cat listed as %v", p)
					}
					return nil
				}
			}
			t.Fatalf("pid %d not in %v", catPid, res.Msg.GetProcesses())
			return nil
		}},
		{conn, "re-attach to cat by pid", ok, func(t *testing.T, ctx context.Context) error {
			s, err := pc.Connect(longCtx, connect.NewRequest(&procpb.ConnectRequest{Process: procPid(catPid)}))
			if err != nil {
				return err
			}
			outer.Cleanup(func() { s.Close() })
			pid, err := firstPid(s)
			if err != nil {
				return err
			}
			if pid != catPid {
				t.Fatalf("Connect start pid %d, want %d", pid, catPid)
			}
			connRes = drainAsync(s, pid)
			return nil
		}},
		{input, "stdin to cat", ok, func(t *testing.T, ctx context.Context) error {
			_, err := pc.SendInput(ctx, connect.NewRequest(&procpb.SendInputRequest{Process: procPid(catPid), Input: stdin("hello\n")}))
			return err
		}},
		{closeStd, "cat ends with its input", ok, func(t *testing.T, ctx context.Context) error {
			if _, err := pc.CloseStdin(ctx, connect.NewRequest(&procpb.CloseStdinRequest{Process: procPid(catPid)})); err != nil {
				return err
			}
			for name, ch := range map[string]<-chan *procResult{"Start": catRes, "Connect": connRes} {
				r := awaitResult(t, ch)
				if r.err != nil || r.stdout.String() != "hello\n" || r.end.GetExitCode() != 0 || !r.end.GetExited() {
					t.Errorf("%s stream of cat: out %q end %v err %v", name, r.stdout.String(), r.end, r.err)
				}
			}
			return nil
		}},
		{sinput, "stdin to cat over HTTP/1.1", ok, func(t *testing.T, ctx context.Context) error {
			return streamInputRoundTrip(t, ctx, pc, "si1")
		}},
		{sinput, "stdin to cat over h2c", ok, func(t *testing.T, ctx context.Context) error {
			return streamInputRoundTrip(t, ctx, h2, "si2")
		}},
		{start, "pty shell", ok, func(t *testing.T, ctx context.Context) (err error) {
			ptyPid, ptyRes, err = startBg(&procpb.StartRequest{Process: &procpb.ProcessConfig{Cmd: "/bin/sh"},
				Pty: &procpb.PTY{Size: &procpb.PTY_Size{Cols: 80, Rows: 24}}, Tag: ptr("pty-" + codec)})
			return err
		}},
		{update, "resize pty", ok, func(t *testing.T, ctx context.Context) error {
			if _, err := pc.Update(ctx, connect.NewRequest(&procpb.UpdateRequest{Process: procPid(ptyPid),
				Pty: &procpb.PTY{Size: &procpb.PTY_Size{Cols: 100, Rows: 40}}})); err != nil {
				return err
			}
			if _, err := pc.SendInput(ctx, connect.NewRequest(&procpb.SendInputRequest{Process: procPid(ptyPid),
				Input: &procpb.ProcessInput{Input: &procpb.ProcessInput_Pty{Pty: []byte("stty size; exit 7\n")}}})); err != nil {
				t.Fatalf("SendInput pty: %v", err)
			}
			r := awaitResult(t, ptyRes)
			if r.err != nil || !strings.Contains(r.pty.String(), "40 100") || r.end.GetExitCode() != 7 {
				t.Fatalf("pty shell: out %q end %v err %v", r.pty.String(), r.end, r.err)
			}
			return nil
		}},
		{start, "sleep 30", ok, func(t *testing.T, ctx context.Context) (err error) {
			sleepPid, sleepRes, err = startBg(&procpb.StartRequest{Process: &procpb.ProcessConfig{Cmd: "sleep", Args: []string{"30"}},
				Stdin: ptr(false), Tag: ptr("sleep-" + codec)})
			return err
		}},

		// Negative, while sleep runs.
		{signal, "unspecified signal", connect.CodeUnimplemented, func(t *testing.T, ctx context.Context) error {
			_, err := pc.SendSignal(ctx, connect.NewRequest(&procpb.SendSignalRequest{Process: procPid(sleepPid), Signal: procpb.Signal_SIGNAL_UNSPECIFIED}))
			return err
		}},
		{signal, "signal 1", connect.CodeUnimplemented, func(t *testing.T, ctx context.Context) error {
			_, err := pc.SendSignal(ctx, connect.NewRequest(&procpb.SendSignalRequest{Process: procPid(sleepPid), Signal: procpb.Signal(1)}))
			return err
		}},
		{signal, "unknown pid", connect.CodeNotFound, func(t *testing.T, ctx context.Context) error {
			_, err := pc.SendSignal(ctx, connect.NewRequest(&procpb.SendSignalRequest{Process: procPid(unknownPid), Signal: procpb.Signal_SIGNAL_SIGKILL}))
			return err
		}},
		{input, "unknown pid", connect.CodeNotFound, func(t *testing.T, ctx context.Context) error {
			_, err := pc.SendInput(ctx, connect.NewRequest(&procpb.SendInputRequest{Process: procPid(unknownPid), Input: stdin("x")}))
			return err
		}},
		{closeStd, "unknown pid", connect.CodeNotFound, func(t *testing.T, ctx context.Context) error {
			_, err := pc.CloseStdin(ctx, connect.NewRequest(&procpb.CloseStdinRequest{Process: procPid(unknownPid)}))
			return err
		}},
		{update, "unknown pid", connect.CodeNotFound, func(t *testing.T, ctx context.Context) error {
			_, err := pc.Update(ctx, connect.NewRequest(&procpb.UpdateRequest{Process: procPid(unknownPid), Pty: &procpb.PTY{Size: &procpb.PTY_Size{Cols: 1, Rows: 1}}}))
			return err
		}},
		{conn, "unknown pid", connect.CodeNotFound, func(t *testing.T, ctx context.Context) error {
			s, err := pc.Connect(ctx, connect.NewRequest(&procpb.ConnectRequest{Process: procPid(unknownPid)}))
			return firstStreamErr(s, err)
		}},
		{sinput, "unknown pid", connect.CodeNotFound, func(t *testing.T, ctx context.Context) error {
			return streamInput(ctx, pc, siStart(unknownPid), siData("x"))
		}},
		{sinput, "data before start", connect.CodeInvalidArgument, func(t *testing.T, ctx context.Context) error {
			return streamInput(ctx, pc, siData("x"))
		}},
		{start, "missing cwd", connect.CodeInvalidArgument, func(t *testing.T, ctx context.Context) error {
			return startErr(ctx, pc, &procpb.StartRequest{Process: &procpb.ProcessConfig{Cmd: "true", Cwd: ptr("/does/not/exist")}})
		}},
		{start, "nonexistent binary", connect.CodeInternal, func(t *testing.T, ctx context.Context) error {
			return startErr(ctx, pc, &procpb.StartRequest{Process: &procpb.ProcessConfig{Cmd: "/no/such/binary-moat"}})
		}},
		{start, "unknown user", connect.CodeUnauthenticated, func(t *testing.T, ctx context.Context) error {
			return startErr(ctx, pc, &procpb.StartRequest{Process: &procpb.ProcessConfig{Cmd: "true"}}, "Authorization", unknownUser)
		}},

		// Positive: SIGKILL ends sleep.
		{signal, "SIGKILL sleep", ok, func(t *testing.T, ctx context.Context) error {
			if _, err := pc.SendSignal(ctx, connect.NewRequest(&procpb.SendSignalRequest{Process: procPid(sleepPid), Signal: procpb.Signal_SIGNAL_SIGKILL})); err != nil {
				return err
			}
			r := awaitResult(t, sleepRes)
			if r.err != nil || r.end.GetExitCode() != -1 || r.end.GetExited() {
				t.Fatalf("sleep: end %v err %v, want exit code -1, not exited", r.end, r.err)
			}
			return nil
		}},

		// Without the access token every RPC is unauthenticated.
		{list, "no token", connect.CodeUnauthenticated, func(t *testing.T, ctx context.Context) error {
			_, err := bare.List(ctx, connect.NewRequest(&procpb.ListRequest{}))
			return err
		}},
		{conn, "no token", connect.CodeUnauthenticated, func(t *testing.T, ctx context.Context) error {
			s, err := bare.Connect(ctx, connect.NewRequest(&procpb.ConnectRequest{Process: procPid(unknownPid)}))
			return firstStreamErr(s, err)
		}},
		{start, "no token", connect.CodeUnauthenticated, func(t *testing.T, ctx context.Context) error {
			return startErr(ctx, bare, &procpb.StartRequest{Process: &procpb.ProcessConfig{Cmd: "true"}})
		}},
		{update, "no token", connect.CodeUnauthenticated, func(t *testing.T, ctx context.Context) error {
			_, err := bare.Update(ctx, connect.NewRequest(&procpb.UpdateRequest{Process: procPid(unknownPid)}))
			return err
		}},
		{sinput, "no token", connect.CodeUnauthenticated, func(t *testing.T, ctx context.Context) error {
			return streamInput(ctx, bare, siStart(unknownPid))
		}},
		{input, "no token", connect.CodeUnauthenticated, func(t *testing.T, ctx context.Context) error {
			_, err := bare.SendInput(ctx, connect.NewRequest(&procpb.SendInputRequest{Process: procPid(unknownPid), Input: stdin("x")}))
			return err
		}},
		{signal, "no token", connect.CodeUnauthenticated, func(t *testing.T, ctx context.Context) error {
			_, err := bare.SendSignal(ctx, connect.NewRequest(&procpb.SendSignalRequest{Process: procPid(unknownPid), Signal: procpb.Signal_SIGNAL_SIGKILL}))
			return err
		}},
		{closeStd, "no token", connect.CodeUnauthenticated, func(t *testing.T, ctx context.Context) error {
			_, err := bare.CloseStdin(ctx, connect.NewRequest(&procpb.CloseStdinRequest{Process: procPid(unknownPid)}))
			return err
		}},
		{list, "with token after unauthenticated", ok, func(t *testing.T, ctx context.Context) error {
			_, err := pc.List(ctx, connect.NewRequest(&procpb.ListRequest{}))
			return err
		}},
	}
}

func TestRPCAllFilesystem(t *testing.T) {
	e := startRPCEnvd(t)
	for _, codec := range rpcCodecs {
		t.Run(codec.name, func(t *testing.T) {
			fc := filesystemconnect.NewFilesystemClient(rpcClient(t, false, map[string]string{"X-Access-Token": rpcToken}), e.URL, codec.opts...)
			bare := filesystemconnect.NewFilesystemClient(rpcClient(t, false, nil), e.URL, codec.opts...)
			base := filepath.Join(e.Home, codec.name)
			cases := filesystemCases(t, base, fc, bare)
			checkRPCCoverage(t, filesystemProcedures, cases)
			runRPCCases(t, cases)
		})
	}
}

func filesystemCases(t *testing.T, base string, fc, bare filesystemconnect.FilesystemClient) []rpcCase {
	const (
		stat      = filesystemconnect.FilesystemStatProcedure
		mkdir     = filesystemconnect.FilesystemMakeDirProcedure
		move      = filesystemconnect.FilesystemMoveProcedure
		listDir   = filesystemconnect.FilesystemListDirProcedure
		remove    = filesystemconnect.FilesystemRemoveProcedure
		watchDir  = filesystemconnect.FilesystemWatchDirProcedure
		createW   = filesystemconnect.FilesystemCreateWatcherProcedure
		getEvents = filesystemconnect.FilesystemGetWatcherEventsProcedure
		removeW   = filesystemconnect.FilesystemRemoveWatcherProcedure
	)
	ok := connect.Code(0)
	var (
		a       = filepath.Join(base, "a")
		ab      = filepath.Join(a, "b")
		file    = filepath.Join(ab, "f.txt")
		moved   = filepath.Join(a, "g.txt")
		missing = filepath.Join(base, "missing")
		watcher string
	)
	write := func(t *testing.T, p, data string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mkdirAll := func(t *testing.T, p string) {
		t.Helper()
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return []rpcCase{
		{mkdir, "with parents", ok, func(t *testing.T, ctx context.Context) error {
			res, err := fc.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: ab}))
			if err != nil {
				return err
			}
			if en := res.Msg.GetEntry(); en.GetPath() != ab || en.GetName() != "b" || en.GetType() != fspb.FileType_FILE_TYPE_DIRECTORY {
				t.Fatalf("MakeDir entry = %v", en)
			}
			return nil
		}},
		{mkdir, "existing", connect.CodeAlreadyExists, func(t *testing.T, ctx context.Context) error {
			_, err := fc.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: ab}))
			return err
		}},
		{stat, "file", ok, func(t *testing.T, ctx context.Context) error {
			write(t, file, "hello")
			res, err := fc.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: file}))
			if err != nil {
				return err
			}
			if en := res.Msg.GetEntry(); en.GetPath() != file || en.GetName() != "f.txt" || en.GetSize() != 5 || en.GetType() != fspb.FileType_FILE_TYPE_FILE {
				t.Fatalf("Stat entry = %v", en)
			}
			return nil
		}},
		{stat, "missing", connect.CodeNotFound, func(t *testing.T, ctx context.Context) error {
			_, err := fc.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: missing}))
			return err
		}},
		{stat, "NUL byte", connect.CodeInvalidArgument, func(t *testing.T, ctx context.Context) error {
			_, err := fc.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: base + "/a\x00b"}))
			return err
		}},
		{stat, "unknown user", connect.CodeUnauthenticated, func(t *testing.T, ctx context.Context) error {
			r := connect.NewRequest(&fspb.StatRequest{Path: file})
			r.Header().Set("Authorization", unknownUser)
			_, err := fc.Stat(ctx, r)
			return err
		}},
		{listDir, "depth 2", ok, func(t *testing.T, ctx context.Context) error {
			res, err := fc.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: base, Depth: 2}))
			if err != nil {
				return err
			}
			got := map[string]fspb.FileType{}
			for _, en := range res.Msg.GetEntries() {
				got[en.GetPath()] = en.GetType()
			}
			want := map[string]fspb.FileType{a: fspb.FileType_FILE_TYPE_DIRECTORY, ab: fspb.FileType_FILE_TYPE_DIRECTORY}
			if len(got) != len(want) || got[a] != want[a] || got[ab] != want[ab] {
				t.Fatalf("ListDir depth 2 = %v, want %v", got, want)
			}
			return nil
		}},
		{listDir, "on a file", connect.CodeInvalidArgument, func(t *testing.T, ctx context.Context) error {
			_, err := fc.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: file}))
			return err
		}},
		{move, "file", ok, func(t *testing.T, ctx context.Context) error {
			res, err := fc.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: file, Destination: moved}))
			if err != nil {
				return err
			}
			if en := res.Msg.GetEntry(); en.GetPath() != moved || en.GetSize() != 5 {
				t.Fatalf("Move entry = %v", en)
			}
			if _, err := os.Stat(file); !os.IsNotExist(err) {
				t.Fatalf("source still there: %v", err)
			}
			return nil
		}},
		{move, "missing source", connect.CodeNotFound, func(t *testing.T, ctx context.Context) error {
			_, err := fc.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: missing, Destination: filepath.Join(base, "dst")}))
			return err
		}},
		{remove, "file", ok, func(t *testing.T, ctx context.Context) error {
			if _, err := fc.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: moved})); err != nil {
				return err
			}
			if _, err := os.Stat(moved); !os.IsNotExist(err) {
				t.Fatalf("still there: %v", err)
			}
			return nil
		}},
		{remove, "missing succeeds", ok, func(t *testing.T, ctx context.Context) error {
			_, err := fc.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: missing}))
			return err
		}},
		{remove, "NUL byte", connect.CodeInvalidArgument, func(t *testing.T, ctx context.Context) error {
			_, err := fc.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: base + "/x\x00"}))
			return err
		}},
		{watchDir, "create event", ok, func(t *testing.T, ctx context.Context) error {
			dir := filepath.Join(base, "w")
			mkdirAll(t, dir)
			s, err := fc.WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{Path: dir}))
			if err != nil {
				return err
			}
			defer s.Close()
			if !s.Receive() {
				return s.Err()
			}
			if s.Msg().GetStart() == nil {
				t.Fatalf("first message %v, want start", s.Msg())
			}
			write(t, filepath.Join(dir, "new.txt"), "x")
			for s.Receive() {
				if fe := s.Msg().GetFilesystem(); fe.GetName() == "new.txt" && fe.GetType() == fspb.EventType_EVENT_TYPE_CREATE {
					return nil
				}
			}
			t.Fatalf("stream ended without the create event: %v", s.Err())
			return nil
		}},
		{watchDir, "missing", connect.CodeNotFound, func(t *testing.T, ctx context.Context) error {
			s, err := fc.WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{Path: missing}))
			if err != nil {
				return err
			}
			defer s.Close()
			if s.Receive() {
				t.Fatalf("first receive got %v", s.Msg())
			}
			return s.Err()
		}},
		{createW, "polling watcher", ok, func(t *testing.T, ctx context.Context) error {
			dir := filepath.Join(base, "pw")
			mkdirAll(t, dir)
			res, err := fc.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: dir}))
			if err != nil {
				return err
			}
			if watcher = res.Msg.GetWatcherId(); watcher == "" {
				t.Fatal("empty watcher id")
			}
			write(t, filepath.Join(dir, "p.txt"), "x")
			return nil
		}},
		{createW, "missing", connect.CodeNotFound, func(t *testing.T, ctx context.Context) error {
			_, err := fc.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: missing}))
			return err
		}},
		{getEvents, "sees the write", ok, func(t *testing.T, ctx context.Context) error {
			var seen []*fspb.FilesystemEvent
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				res, err := fc.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: watcher}))
				if err != nil {
					return err
				}
				for _, ev := range res.Msg.GetEvents() {
					seen = append(seen, ev)
					if ev.GetName() == "p.txt" && ev.GetType() == fspb.EventType_EVENT_TYPE_CREATE {
						return nil
					}
				}
			}
			t.Fatalf("no create event for p.txt; saw %v", seen)
			return nil
		}},
		{getEvents, "unknown id", connect.CodeNotFound, func(t *testing.T, ctx context.Context) error {
			_, err := fc.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: "no-such-watcher"}))
			return err
		}},
		{removeW, "polling watcher", ok, func(t *testing.T, ctx context.Context) error {
			_, err := fc.RemoveWatcher(ctx, connect.NewRequest(&fspb.RemoveWatcherRequest{WatcherId: watcher}))
			return err
		}},
		{getEvents, "removed watcher", connect.CodeNotFound, func(t *testing.T, ctx context.Context) error {
			_, err := fc.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: watcher}))
			return err
		}},
		{removeW, "unknown id", connect.CodeNotFound, func(t *testing.T, ctx context.Context) error {
			_, err := fc.RemoveWatcher(ctx, connect.NewRequest(&fspb.RemoveWatcherRequest{WatcherId: "no-such-watcher"}))
			return err
		}},

		// Without the access token every RPC is unauthenticated.
		{stat, "no token", connect.CodeUnauthenticated, func(t *testing.T, ctx context.Context) error {
			_, err := bare.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: base}))
			return err
		}},
		{mkdir, "no token", connect.CodeUnauthenticated, func(t *testing.T, ctx context.Context) error {
			_, err := bare.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: filepath.Join(base, "nt")}))
			return err
		}},
		{move, "no token", connect.CodeUnauthenticated, func(t *testing.T, ctx context.Context) error {
			_, err := bare.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: a, Destination: filepath.Join(base, "nt")}))
			return err
		}},
		{listDir, "no token", connect.CodeUnauthenticated, func(t *testing.T, ctx context.Context) error {
			_, err := bare.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: base}))
			return err
		}},
		{remove, "no token", connect.CodeUnauthenticated, func(t *testing.T, ctx context.Context) error {
			_, err := bare.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: a}))
			return err
		}},
		{watchDir, "no token", connect.CodeUnauthenticated, func(t *testing.T, ctx context.Context) error {
			s, err := bare.WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{Path: base}))
			return firstStreamErr(s, err)
		}},
		{createW, "no token", connect.CodeUnauthenticated, func(t *testing.T, ctx context.Context) error {
			_, err := bare.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: base}))
			return err
		}},
		{getEvents, "no token", connect.CodeUnauthenticated, func(t *testing.T, ctx context.Context) error {
			_, err := bare.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: "x"}))
			return err
		}},
		{removeW, "no token", connect.CodeUnauthenticated, func(t *testing.T, ctx context.Context) error {
			_, err := bare.RemoveWatcher(ctx, connect.NewRequest(&fspb.RemoveWatcherRequest{WatcherId: "x"}))
			return err
		}},
		{stat, "with token after unauthenticated", ok, func(t *testing.T, ctx context.Context) error {
			_, err := fc.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: a}))
			if err == nil {
				if _, serr := os.Stat(filepath.Join(base, "nt")); !os.IsNotExist(serr) {
					t.Fatalf("an unauthenticated call changed the filesystem: %v", serr)
				}
			}
			return err
		}},
	}
}
