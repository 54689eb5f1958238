package runcmd_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/moatsh/moat/api/envd/process/processconnect"
	"github.com/moatsh/moat/internal/envd/envdtest"
	"github.com/moatsh/moat/internal/envd/runcmd"
)

// TestRun runs commands through a real envd (host mode).
func TestRun(t *testing.T) {
	e := envdtest.Start(t)
	pc := processconnect.NewProcessClient(http.DefaultClient, e.URL, connect.WithProtoJSON())
	for _, tc := range []struct {
		name    string
		cmd     runcmd.Command
		timeout time.Duration
		want    runcmd.Exit
		out     string // stdout's lines, then stderr's (the two pipes' relative order is not kept)
		wantErr error
	}{
		{name: "exit 0 with output", cmd: runcmd.Command{Argv: []string{"/bin/sh", "-c", "echo hi; echo err >&2"}},
			want: runcmd.Exit{Code: 0, Exited: true, Status: "exit status 0"}, out: "stdout:hi\nstderr:err\n"},
		{name: "exit code", cmd: runcmd.Command{Argv: []string{"/bin/sh", "-c", "exit 3"}},
			want: runcmd.Exit{Code: 3, Exited: true, Status: "exit status 3"}},
		{name: "signal", cmd: runcmd.Command{Argv: []string{"/bin/sh", "-c", "kill -9 $$"}},
			want: runcmd.Exit{Code: -1, Status: "signal: killed"}},
		{name: "env, cwd and keepalive", cmd: runcmd.Command{Argv: []string{"/bin/sh", "-c", `echo "$A $(pwd)"`},
			Env: map[string]string{"A": "1"}, Cwd: "/tmp", KeepAlive: time.Second},
			want: runcmd.Exit{Code: 0, Exited: true, Status: "exit status 0"}, out: "stdout:1 /tmp\n"},
		{name: "no such program", cmd: runcmd.Command{Argv: []string{"/nonexistent"}},
			want: runcmd.Exit{Code: -1}, wantErr: errAny},
		// A deadline not kept shows as exit status 0 after 30 s, not
		// DeadlineExceeded.
		{name: "deadline", cmd: runcmd.Command{Argv: []string{"/bin/sh", "-c", "sleep 30"}}, timeout: 300 * time.Millisecond,
			want: runcmd.Exit{Code: -1}, wantErr: context.DeadlineExceeded},
		{name: "no program", want: runcmd.Exit{Code: -1}, wantErr: errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			var mu sync.Mutex
			streams := map[string]*strings.Builder{"stdout": {}, "stderr": {}}
			tc.cmd.User = "user"
			tc.cmd.Output = func(stream string, b []byte) {
				mu.Lock()
				defer mu.Unlock()
				for _, l := range strings.SplitAfter(string(b), "\n") {
					if l != "" {
						streams[stream].WriteString(stream + ":" + l)
					}
				}
			}
			got, err := runcmd.Run(ctx, pc, tc.cmd)
			switch {
			case tc.wantErr == nil && err != nil, tc.wantErr != nil && err == nil:
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			case tc.wantErr != nil && tc.wantErr != errAny && !errors.Is(err, tc.wantErr) &&
				connect.CodeOf(err) != connect.CodeDeadlineExceeded:
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			out := streams["stdout"].String() + streams["stderr"].String()
			if got != tc.want || out != tc.out {
				t.Fatalf("got %+v with output %q, want %+v with %q", got, out, tc.want, tc.out)
			}
		})
	}
}

// errAny stands for any error.
var errAny = errors.New("any error")

func TestRunUnreachable(t *testing.T) {
	pc := processconnect.NewProcessClient(http.DefaultClient, "http://127.0.0.1:1", connect.WithProtoJSON())
	if _, err := runcmd.Run(context.Background(), pc, runcmd.Command{Argv: []string{"true"}}); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("err %v (code %v), want Unavailable", err, connect.CodeOf(err))
	}
}
