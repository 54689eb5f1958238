package moat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/moatsh/moat/api/envd/process"
	"github.com/moatsh/moat/api/envd/process/processconnect"
)

// fakeAPI serves the REST endpoints the client uses from a handler table.
func fakeAPI(t *testing.T, routes map[string]http.HandlerFunc) *Client {
	t.Helper()
	mux := http.NewServeMux()
	for pattern, h := range routes {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-API-Key") != "e2b_test" {
				w.WriteHeader(http.StatusUnauthorized)
				io.WriteString(w, `{"code":401,"message":"invalid API key"}`)
				return
			}
			h(w, r)
		})
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &Client{APIURL: srv.URL, APIKey: "e2b_test", HTTPClient: srv.Client()}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func TestCreateSandbox(t *testing.T) {
	var got map[string]any
	c := fakeAPI(t, map[string]http.HandlerFunc{
		"POST /sandboxes": func(w http.ResponseWriter, r *http.Request) {
			json.NewDecoder(r.Body).Decode(&got)
			writeJSON(w, http.StatusCreated, map[string]any{"sandboxID": "i123", "templateID": "base",
				"clientID": "6532622b", "envdVersion": "0.6.13", "envdAccessToken": "tok"})
		},
	})
	sb, err := c.CreateSandbox(context.Background(), CreateOptions{
		Metadata: map[string]string{"k": "v"}, EnvVars: map[string]string{"A": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != "i123" || sb.AccessToken != "tok" || sb.Info.EnvdVersion != "0.6.13" {
		t.Fatalf("sandbox = %+v", sb)
	}
	want := map[string]any{"templateID": "base", "timeout": float64(300), "secure": true,
		"metadata": map[string]any{"k": "v"}, "envVars": map[string]any{"A": "1"}}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if !bytes.Equal(gb, wb) {
		t.Fatalf("body = %s, want %s", gb, wb)
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		body    string
		want    error
		wantMsg string
	}{
		{"not found", 404, `{"code":404,"message":"sandbox i1 not found"}`, ErrNotFound, "sandbox i1 not found"},
		{"bad request", 400, `{"code":400,"message":"timeout too large"}`, ErrInvalidArgument, "timeout too large"},
		{"conflict", 409, `{"code":409,"message":"paused"}`, ErrConflict, "paused"},
		{"rate", 429, `{"code":429,"message":"slow down"}`, ErrRateLimited, "slow down"},
		{"busy", 503, `{"code":503,"message":"no capacity"}`, ErrUnavailable, "no capacity"},
		{"plain text", 500, "boom", ErrInternal, "boom"},
		{"empty body", 403, "", ErrForbidden, "Forbidden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fakeAPI(t, map[string]http.HandlerFunc{
				"GET /sandboxes/{id}": func(w http.ResponseWriter, r *http.Request) {
					w.WriteHeader(tt.status)
					io.WriteString(w, tt.body)
				},
			})
			_, err := c.GetSandbox(context.Background(), "i1")
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			var apiErr *APIError
			if !errors.As(err, &apiErr) || apiErr.StatusCode != tt.status || apiErr.Message != tt.wantMsg {
				t.Fatalf("APIError = %+v", apiErr)
			}
		})
	}
}

func TestUnauthorized(t *testing.T) {
	c := fakeAPI(t, map[string]http.HandlerFunc{"GET /sandboxes": func(http.ResponseWriter, *http.Request) {}})
	c.APIKey = "wrong"
	if _, err := c.ListSandboxes(context.Background()); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("err = %v, want ErrUnauthorized", err)
	}
}

func TestListGetKill(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	killed := ""
	c := fakeAPI(t, map[string]http.HandlerFunc{
		"GET /sandboxes": func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 200, []map[string]any{{"sandboxID": "i1", "templateID": "base", "clientID": "x",
				"envdVersion": "0.6.13", "startedAt": start, "endAt": start.Add(time.Minute), "state": "running",
				"cpuCount": 2, "memoryMB": 512, "diskSizeMB": 2048, "metadata": map[string]string{"a": "b"}}})
		},
		"GET /sandboxes/{id}": func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 200, map[string]any{"sandboxID": r.PathValue("id"), "templateID": "base",
				"envdAccessToken": "tok", "state": "running"})
		},
		"DELETE /sandboxes/{id}": func(w http.ResponseWriter, r *http.Request) {
			killed = r.PathValue("id")
			w.WriteHeader(http.StatusNoContent)
		},
	})
	ctx := context.Background()
	list, err := c.ListSandboxes(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("ListSandboxes() = %v, %v", list, err)
	}
	if l := list[0]; l.ID != "i1" || !l.StartedAt.Equal(start) || l.MemoryMB != 512 || l.Metadata["a"] != "b" {
		t.Fatalf("listed = %+v", l)
	}
	sb, err := c.GetSandbox(ctx, "i2")
	if err != nil || sb.ID != "i2" || sb.AccessToken != "tok" {
		t.Fatalf("GetSandbox() = %+v, %v", sb, err)
	}
	if err := sb.Kill(ctx); err != nil || killed != "i2" {
		t.Fatalf("Kill() = %v, killed %q", err, killed)
	}
}

func TestNewClientEnv(t *testing.T) {
	tests := []struct {
		name             string
		env              map[string]string
		wantAPI, wantKey string
	}{
		{"defaults", nil, DefaultAPIURL, ""},
		{"e2b names", map[string]string{"E2B_API_URL": "http://e", "E2B_API_KEY": "e2b_1"}, "http://e", "e2b_1"},
		{"moat wins", map[string]string{"E2B_API_URL": "http://e", "MOAT_API_URL": "http://m",
			"E2B_API_KEY": "e2b_1", "MOAT_API_KEY": "e2b_2"}, "http://m", "e2b_2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, n := range []string{"E2B_API_URL", "MOAT_API_URL", "E2B_API_KEY", "MOAT_API_KEY",
				"MOAT_SANDBOX_URL", "E2B_SANDBOX_URL"} {
				t.Setenv(n, tt.env[n])
			}
			c := NewClient()
			if c.APIURL != tt.wantAPI || c.APIKey != tt.wantKey || c.sandboxURL() != tt.wantAPI {
				t.Fatalf("client = %+v", c)
			}
		})
	}
}

// fakeEnvd implements Process.Start, checking the routing headers.
type fakeEnvd struct {
	processconnect.UnimplementedProcessHandler
	t      *testing.T
	gotReq *process.StartRequest
	events []*process.ProcessEvent
}

func (f *fakeEnvd) Start(_ context.Context, req *connect.Request[process.StartRequest],
	stream *connect.ServerStream[process.StartResponse]) error {
	h := req.Header()
	if h.Get("E2b-Sandbox-Id") != "i1" || h.Get("E2b-Sandbox-Port") != "49983" || h.Get("X-Access-Token") != "tok" {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("bad headers"))
	}
	if h.Get("Authorization") != "Basic dXNlcjo=" { // "user:"
		return connect.NewError(connect.CodePermissionDenied, errors.New("no user"))
	}
	f.gotReq = req.Msg
	for _, ev := range f.events {
		if err := stream.Send(&process.StartResponse{Event: ev}); err != nil {
			return err
		}
	}
	return nil
}

func startEv() *process.ProcessEvent {
	return &process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: 7}}}
}

func outEv(stdout, stderr string) *process.ProcessEvent {
	d := &process.ProcessEvent_DataEvent{}
	if stdout != "" {
		d.Output = &process.ProcessEvent_DataEvent_Stdout{Stdout: []byte(stdout)}
	} else {
		d.Output = &process.ProcessEvent_DataEvent_Stderr{Stderr: []byte(stderr)}
	}
	return &process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: d}}
}

func endEv(code int32) *process.ProcessEvent {
	return &process.ProcessEvent{Event: &process.ProcessEvent_End{End: &process.ProcessEvent_EndEvent{ExitCode: code, Exited: true}}}
}

func TestRun(t *testing.T) {
	tests := []struct {
		name               string
		token              string
		events             []*process.ProcessEvent
		wantCode           int
		wantOut, wantErrTx string
		wantErr            error
	}{
		{"ok", "tok", []*process.ProcessEvent{startEv(), outEv("hi\n", ""), outEv("", "oops\n"), endEv(0)}, 0, "hi\n", "oops\n", nil},
		{"exit 3", "tok", []*process.ProcessEvent{startEv(), endEv(3)}, 3, "", "", nil},
		{"no end", "tok", []*process.ProcessEvent{startEv()}, -1, "", "", ErrUnavailable},
		{"wrong token", "bad", nil, -1, "", "", ErrUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeEnvd{t: t, events: tt.events}
			mux := http.NewServeMux()
			mux.Handle(processconnect.NewProcessHandler(f))
			srv := httptest.NewServer(mux)
			defer srv.Close()
			c := &Client{APIURL: "http://unused.invalid", SandboxURL: srv.URL, HTTPClient: srv.Client()}
			sb := &Sandbox{ID: "i1", AccessToken: tt.token, client: c}
			var out, errOut strings.Builder
			code, err := sb.Run(context.Background(), "echo hi", RunOptions{Stdout: &out, Stderr: &errOut,
				User: "user", Cwd: "/tmp", Envs: map[string]string{"A": "1"}})
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Run() err = %v, want %v", err, tt.wantErr)
			}
			if code != tt.wantCode || out.String() != tt.wantOut || errOut.String() != tt.wantErrTx {
				t.Fatalf("Run() = %d %q %q", code, out.String(), errOut.String())
			}
			if tt.wantErr == nil {
				p := f.gotReq.GetProcess()
				if p.GetCmd() != "/bin/bash" || strings.Join(p.GetArgs(), " ") != "-l -c echo hi" ||
					p.GetCwd() != "/tmp" || p.GetEnvs()["A"] != "1" || f.gotReq.Stdin == nil || *f.gotReq.Stdin {
					t.Fatalf("start request = %v", f.gotReq)
				}
			}
		})
	}
}
