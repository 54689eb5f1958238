package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/moatsh/moat/api/envd/process"
	"github.com/moatsh/moat/api/envd/process/processconnect"
)

func TestShellJoin(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"ls | wc -l"}, "ls | wc -l"},
		{[]string{"python3", "-c", "print(sum(range(10)))"}, "python3 -c 'print(sum(range(10)))'"},
		{[]string{"echo", "it's"}, `echo 'it'\''s'`},
		{[]string{"echo", ""}, "echo ''"},
		{[]string{"ls", "-la", "/tmp"}, "ls -la /tmp"},
	}
	for _, tt := range tests {
		if got := shellJoin(tt.args); got != tt.want {
			t.Errorf("shellJoin(%q) = %s, want %s", tt.args, got, tt.want)
		}
	}
}

func TestParseKV(t *testing.T) {
	tests := []struct {
		in      []string
		want    map[string]string
		wantErr bool
	}{
		{nil, nil, false},
		{[]string{"A=1", "B=x=y", "C="}, map[string]string{"A": "1", "B": "x=y", "C": ""}, false},
		{[]string{"novalue"}, nil, true},
		{[]string{"=v"}, nil, true},
	}
	for _, tt := range tests {
		got, err := parseKV(tt.in)
		if (err != nil) != tt.wantErr || len(got) != len(tt.want) {
			t.Errorf("parseKV(%q) = %v, %v", tt.in, got, err)
		}
		for k, v := range tt.want {
			if got[k] != v {
				t.Errorf("parseKV(%q)[%s] = %q, want %q", tt.in, k, got[k], v)
			}
		}
	}
}

func TestExitStatus(t *testing.T) {
	tests := []struct{ code, want int }{{0, 0}, {3, 3}, {-1, 137}}
	for _, tt := range tests {
		err := exitStatus(tt.code)
		got := 0
		var ee exitError
		if errors.As(err, &ee) {
			got = ee.code
		}
		if got != tt.want {
			t.Errorf("exitStatus(%d) = %d, want %d", tt.code, got, tt.want)
		}
	}
}

// fakeServer is a REST API plus envd that runs every command by echoing it.
type fakeServer struct {
	processconnect.UnimplementedProcessHandler
	mu      sync.Mutex
	created int
	killed  []string
	ran     []string
}

func (f *fakeServer) Start(_ context.Context, req *connect.Request[process.StartRequest],
	stream *connect.ServerStream[process.StartResponse]) error {
	if req.Header().Get("X-Access-Token") != "tok" {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("token"))
	}
	cmd := req.Msg.GetProcess().GetArgs()[2]
	f.mu.Lock()
	f.ran = append(f.ran, cmd)
	f.mu.Unlock()
	code := int32(0)
	if strings.HasPrefix(cmd, "exit ") {
		code = 42
	}
	for _, ev := range []*process.ProcessEvent{
		{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: 1}}},
		{Event: &process.ProcessEvent_Data{Data: &process.ProcessEvent_DataEvent{
			Output: &process.ProcessEvent_DataEvent_Stdout{Stdout: []byte("ran: " + cmd + "\n")}}}},
		{Event: &process.ProcessEvent_End{End: &process.ProcessEvent_EndEvent{ExitCode: code, Exited: true}}},
	} {
		if err := stream.Send(&process.StartResponse{Event: ev}); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(processconnect.NewProcessHandler(f))
	sb := map[string]any{"sandboxID": "i1", "templateID": "base", "clientID": "x",
		"envdVersion": "0.6.13", "envdAccessToken": "tok", "state": "running"}
	mux.HandleFunc("POST /sandboxes", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.created++
		f.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(sb)
	})
	mux.HandleFunc("GET /sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "i1" {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"code":404,"message":"sandbox not found"}`))
			return
		}
		json.NewEncoder(w).Encode(sb)
	})
	mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode([]any{sb})
	})
	mux.HandleFunc("DELETE /sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.killed = append(f.killed, r.PathValue("id"))
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

func TestClientCommands(t *testing.T) {
	f := &fakeServer{}
	srv := httptest.NewServer(f.handler())
	defer srv.Close()
	t.Setenv("MOAT_API_URL", srv.URL)
	t.Setenv("MOAT_API_KEY", "e2b_test")

	tests := []struct {
		name     string
		args     []string
		wantOut  string
		wantCode int
		wantErr  string
	}{
		{"create", []string{"sandbox", "create", "--template", "base"}, "i1\n", 0, ""},
		{"list", []string{"sandbox", "ls"}, "i1", 0, ""},
		{"exec", []string{"sandbox", "exec", "i1", "--", "echo", "a b"}, "ran: echo 'a b'\n", 0, ""},
		{"exec status", []string{"sandbox", "exec", "i1", "--", "exit 42"}, "ran: exit 42\n", 42, ""},
		{"exec unknown", []string{"sandbox", "exec", "nope", "--", "true"}, "", 0, "sandbox not found"},
		{"run", []string{"run", "--", "python3", "-c", "print(1)"}, "ran: python3 -c 'print(1)'\n", 0, ""},
		{"kill", []string{"sandbox", "kill", "i1"}, "", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code, err := runCLI(tt.args...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || code != tt.wantCode || !strings.Contains(out, tt.wantOut) {
				t.Fatalf("err=%v code=%d out=%q stderr=%q", err, code, out, errOut)
			}
		})
	}
	if len(f.killed) != 2 { // run's own sandbox + kill
		t.Fatalf("killed = %v, want run's sandbox and the explicit kill", f.killed)
	}
}

// runCLI runs the moat command line with args and returns its output, its
// exit code (from an exitError) and any other error.
func runCLI(args ...string) (stdout, stderr string, code int, err error) {
	var out, errOut bytes.Buffer
	root := newRootCmd(&out, &errOut)
	root.SetArgs(args)
	err = root.ExecuteContext(context.Background())
	var ee exitError
	if errors.As(err, &ee) {
		code, err = ee.code, nil
	}
	return out.String(), errOut.String(), code, err
}

// TestFlagUsageStatesDefaultOnce: the help prints a flag's non-zero
// default itself ("(default 4)"); a usage text that says it too shows it
// twice.
func TestFlagUsageStatesDefaultOnce(t *testing.T) {
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.DefValue != "" && strings.Contains(f.Usage, "(default "+f.DefValue+")") {
				t.Errorf("%s --%s: the usage repeats the default the help adds: %q", c.CommandPath(), f.Name, f.Usage)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd(io.Discard, io.Discard))
}
