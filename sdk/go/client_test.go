package moat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
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
		{"disk full", 507, `{"code":507,"message":"not enough disk space available"}`, ErrNoSpace, "not enough disk space available"},
		{"busy", 503, `{"code":503,"message":"no capacity"}`, ErrUnavailable, "no capacity"},
		{"not implemented", 501, `{"code":501,"message":"no snapshots"}`, ErrNotImplemented, "no snapshots"},
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

// reply returns a handler answering status with body (raw, not re-encoded).
func reply(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// checkErr fails t unless err wraps want (nil: err is nil).
func checkErr(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) { // errors.Is(err, nil) is err == nil
		t.Fatalf("err = %v, want %v", err, want)
	}
}

func TestCreateSandboxLifecycleOptions(t *testing.T) {
	tests := []struct {
		name     string
		opts     CreateOptions
		wantBody map[string]any // nil: no request expected
		wantErr  error
	}{
		{"auto pause", CreateOptions{Template: "snapabc", AutoPause: true},
			map[string]any{"templateID": "snapabc", "timeout": float64(300), "secure": true, "autoPause": true}, nil},
		{"auto resume", CreateOptions{Template: "my-snap", AutoPause: true, AutoResume: true, Timeout: time.Minute},
			map[string]any{"templateID": "my-snap", "timeout": float64(60), "secure": true, "autoPause": true,
				"autoResume": map[string]any{"enabled": true}}, nil},
		{"resume without pause", CreateOptions{AutoResume: true}, nil, ErrInvalidArgument},
		{"files only", CreateOptions{AutoPause: true, AutoPauseFilesOnly: true},
			map[string]any{"templateID": "base", "timeout": float64(300), "secure": true, "autoPause": true, "autoPauseMemory": false}, nil},
		{"files only without pause", CreateOptions{AutoPauseFilesOnly: true}, nil, ErrInvalidArgument},
		{"files only with resume", CreateOptions{AutoPause: true, AutoResume: true, AutoPauseFilesOnly: true}, nil, ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got map[string]any
			c := fakeAPI(t, map[string]http.HandlerFunc{
				"POST /sandboxes": func(w http.ResponseWriter, r *http.Request) {
					json.NewDecoder(r.Body).Decode(&got)
					writeJSON(w, http.StatusCreated, map[string]any{"sandboxID": "i1", "envdAccessToken": "tok"})
				},
			})
			_, err := c.CreateSandbox(context.Background(), tt.opts)
			checkErr(t, err, tt.wantErr)
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(tt.wantBody)
			if !bytes.Equal(gb, wb) {
				t.Fatalf("body = %s, want %s", gb, wb)
			}
		})
	}
}

func TestPause(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
		wantErr error
	}{
		{"ok", reply(http.StatusNoContent, ""), nil},
		{"not running", reply(http.StatusConflict, `{"code":409,"message":"sandbox i1 is paused"}`), ErrConflict},
		{"unknown", reply(http.StatusNotFound, `{"code":404,"message":"sandbox i1 not found"}`), ErrNotFound},
		{"wrong success status", reply(http.StatusOK, `{}`), ErrInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gotID := ""
			c := fakeAPI(t, map[string]http.HandlerFunc{
				"POST /sandboxes/{id}/pause": func(w http.ResponseWriter, r *http.Request) {
					gotID = r.PathValue("id")
					tt.handler(w, r)
				},
			})
			sb := &Sandbox{ID: "i1", Info: SandboxInfo{State: "running"}, client: c}
			err := sb.Pause(context.Background())
			checkErr(t, err, tt.wantErr)
			if gotID != "i1" {
				t.Fatalf("paused %q, want i1", gotID)
			}
			wantState := "running"
			if tt.wantErr == nil {
				wantState = "paused"
			}
			if sb.Info.State != wantState {
				t.Fatalf("state = %q, want %q", sb.Info.State, wantState)
			}
		})
	}
}

// TestPauseFilesOnly: the body says memory: false; the answers map as for Pause.
func TestPauseFilesOnly(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
		wantErr error
	}{
		{"ok", reply(http.StatusNoContent, ""), nil},
		{"runtime cannot", reply(http.StatusNotImplemented, `{"code":501,"message":"no"}`), ErrNotImplemented},
		{"not running", reply(http.StatusConflict, `{"code":409,"message":"sandbox i1 is paused"}`), ErrConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body map[string]any
			c := fakeAPI(t, map[string]http.HandlerFunc{
				"POST /sandboxes/{id}/pause": func(w http.ResponseWriter, r *http.Request) {
					json.NewDecoder(r.Body).Decode(&body)
					tt.handler(w, r)
				},
			})
			sb := &Sandbox{ID: "i1", Info: SandboxInfo{State: "running"}, client: c}
			checkErr(t, sb.PauseFilesOnly(context.Background()), tt.wantErr)
			if b, _ := json.Marshal(body); string(b) != `{"memory":false}` {
				t.Fatalf("body = %s, want {\"memory\":false}", b)
			}
		})
	}
}

func TestConnect(t *testing.T) {
	const ok = `{"sandboxID":"i1","templateID":"base","alias":"py","clientID":"x","envdVersion":"0.6.13","envdAccessToken":"tok2"}`
	tests := []struct {
		name        string
		timeout     time.Duration
		handler     http.HandlerFunc
		wantTimeout float64 // seconds sent; 0: no request expected
		wantResumed bool
		wantErr     error
	}{
		{"running", time.Minute, reply(http.StatusOK, ok), 60, false, nil},
		{"resumed", 0, reply(http.StatusCreated, ok), 300, true, nil},
		{"unknown", time.Minute, reply(http.StatusNotFound, `{"code":404,"message":"sandbox i1 not found"}`), 60, false, ErrNotFound},
		{"conflict", time.Minute, reply(http.StatusConflict, `{"code":409,"message":"sandbox i1 is being killed"}`), 60, false, ErrConflict},
		{"bad json", time.Minute, reply(http.StatusOK, `{"sandboxID":`), 60, false, ErrInternal},
		{"no id", time.Minute, reply(http.StatusCreated, `{}`), 60, false, ErrInternal},
		{"unexpected 204", time.Minute, reply(http.StatusNoContent, ""), 60, false, ErrInternal},
		{"timeout too small", 500 * time.Millisecond, reply(http.StatusOK, ok), 0, false, ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got struct {
				Timeout float64 `json:"timeout"`
			}
			c := fakeAPI(t, map[string]http.HandlerFunc{
				"POST /v2/sandboxes/{id}/connect": func(w http.ResponseWriter, r *http.Request) {
					if r.PathValue("id") != "i1" || r.Header.Get("Content-Type") != "application/json" {
						t.Errorf("request %s %v", r.URL, r.Header)
					}
					json.NewDecoder(r.Body).Decode(&got)
					tt.handler(w, r)
				},
			})
			sb, resumed, err := c.Connect(context.Background(), "i1", tt.timeout)
			checkErr(t, err, tt.wantErr)
			if got.Timeout != tt.wantTimeout {
				t.Fatalf("sent timeout %v, want %v", got.Timeout, tt.wantTimeout)
			}
			if tt.wantErr != nil {
				if sb != nil || resumed {
					t.Fatalf("Connect() = %+v, %v on error", sb, resumed)
				}
				return
			}
			if resumed != tt.wantResumed || sb.ID != "i1" || sb.AccessToken != "tok2" ||
				sb.Info.State != "running" || sb.Info.Alias != "py" {
				t.Fatalf("Connect() = %+v, resumed %v", sb, resumed)
			}
		})
	}
}

func TestSandboxConnectRefreshes(t *testing.T) {
	c := fakeAPI(t, map[string]http.HandlerFunc{
		"POST /v2/sandboxes/{id}/connect": reply(http.StatusCreated,
			`{"sandboxID":"i1","templateID":"base","envdVersion":"0.6.14","envdAccessToken":"new"}`),
	})
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sb := &Sandbox{ID: "i1", AccessToken: "old", client: c,
		Info: SandboxInfo{ID: "i1", TemplateID: "base", Alias: "py", State: "paused", StartedAt: start, MemoryMB: 512}}
	resumed, err := sb.Connect(context.Background(), time.Minute)
	if err != nil || !resumed {
		t.Fatalf("Connect() = %v, %v", resumed, err)
	}
	want := SandboxInfo{ID: "i1", TemplateID: "base", Alias: "py", EnvdVersion: "0.6.14", State: "running",
		StartedAt: start, MemoryMB: 512}
	if sb.AccessToken != "new" || !reflect.DeepEqual(sb.Info, want) {
		t.Fatalf("sandbox = %+v", sb)
	}
}

func TestCreateSnapshot(t *testing.T) {
	created := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	okBody := `{"snapshotID":"snap1","names":["v1"],"sandboxID":"i1","createdAt":"2026-03-04T05:06:07Z"}`
	tests := []struct {
		name     string
		snapName string
		handler  http.HandlerFunc
		wantBody string
		want     SnapshotInfo
		wantErr  error
	}{
		{"named", "v1", reply(http.StatusCreated, okBody), `{"name":"v1"}`,
			SnapshotInfo{ID: "snap1", Names: []string{"v1"}, SandboxID: "i1", CreatedAt: created}, nil},
		{"unnamed", "", reply(http.StatusCreated, `{"snapshotID":"snap2","names":[]}`), `{}`,
			SnapshotInfo{ID: "snap2", Names: []string{}}, nil},
		{"container runtime", "", reply(http.StatusNotImplemented,
			`{"code":501,"message":"the container runtime cannot snapshot sandboxes"}`), `{}`, SnapshotInfo{}, ErrNotImplemented},
		{"unknown", "", reply(http.StatusNotFound, `{"code":404,"message":"sandbox i1 not found"}`), `{}`, SnapshotInfo{}, ErrNotFound},
		{"name taken", "v1", reply(http.StatusConflict, `{"code":409,"message":"snapshot \"v1\" already exists"}`),
			`{"name":"v1"}`, SnapshotInfo{}, ErrConflict},
		{"bad name", "a b", reply(http.StatusBadRequest, `{"code":400,"message":"bad name"}`), `{"name":"a b"}`,
			SnapshotInfo{}, ErrInvalidArgument},
		{"bad json", "", reply(http.StatusCreated, `[`), `{}`, SnapshotInfo{}, ErrInternal},
		{"no id", "", reply(http.StatusCreated, `{"names":[]}`), `{}`, SnapshotInfo{}, ErrInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gotBody []byte
			c := fakeAPI(t, map[string]http.HandlerFunc{
				"POST /sandboxes/{id}/snapshots": func(w http.ResponseWriter, r *http.Request) {
					if r.PathValue("id") != "i1" {
						t.Errorf("snapshot of %q", r.PathValue("id"))
					}
					gotBody, _ = io.ReadAll(r.Body)
					tt.handler(w, r)
				},
			})
			sb := &Sandbox{ID: "i1", client: c}
			got, err := sb.CreateSnapshot(context.Background(), tt.snapName)
			checkErr(t, err, tt.wantErr)
			if string(gotBody) != tt.wantBody {
				t.Fatalf("body = %s, want %s", gotBody, tt.wantBody)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("CreateSnapshot() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestListSnapshots(t *testing.T) {
	// pages maps the nextToken query parameter to (body, X-Next-Token).
	type page struct{ body, next string }
	snap := func(id string) string { return `{"snapshotID":"` + id + `","names":[],"sandboxID":"i1"}` }
	tests := []struct {
		name      string
		sandboxID string
		pages     map[string]page
		status    int
		wantIDs   []string
		wantErr   error
	}{
		{"one page", "", map[string]page{"": {"[" + snap("s1") + "]", ""}}, 200, []string{"s1"}, nil},
		{"empty", "i1", map[string]page{"": {"[]", ""}}, 200, nil, nil},
		{"three pages", "i1", map[string]page{
			"":   {"[" + snap("s1") + "," + snap("s2") + "]", "s2"},
			"s2": {"[" + snap("s3") + "," + snap("s4") + "]", "s4"},
			"s4": {"[" + snap("s5") + "]", ""},
		}, 200, []string{"s1", "s2", "s3", "s4", "s5"}, nil},
		{"token loop", "", map[string]page{
			"":   {"[" + snap("s1") + "]", "s1"},
			"s1": {"[" + snap("s2") + "]", "s1"},
		}, 200, nil, ErrInternal},
		{"bad json", "", map[string]page{"": {`{"snapshotID":"s1"}`, ""}}, 200, nil, ErrInternal},
		{"server error", "", map[string]page{"": {`{"code":500,"message":"db gone"}`, ""}}, 500, nil, ErrInternal},
		{"bad request", "", map[string]page{"": {`{"code":400,"message":"Invalid next token"}`, ""}}, 400, nil, ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			c := fakeAPI(t, map[string]http.HandlerFunc{
				"GET /snapshots": func(w http.ResponseWriter, r *http.Request) {
					calls++
					q := r.URL.Query()
					if q.Get("sandboxID") != tt.sandboxID {
						t.Errorf("sandboxID = %q, want %q", q.Get("sandboxID"), tt.sandboxID)
					}
					p, ok := tt.pages[q.Get("nextToken")]
					if !ok || calls > 10 {
						t.Errorf("unexpected page %q (call %d)", q.Get("nextToken"), calls)
						w.WriteHeader(http.StatusBadRequest)
						return
					}
					if p.next != "" {
						w.Header().Set("X-Next-Token", p.next)
					}
					reply(tt.status, p.body)(w, r)
				},
			})
			got, err := c.ListSnapshots(context.Background(), tt.sandboxID)
			checkErr(t, err, tt.wantErr)
			var ids []string
			for _, s := range got {
				ids = append(ids, s.ID)
			}
			if !reflect.DeepEqual(ids, tt.wantIDs) {
				t.Fatalf("IDs = %v, want %v", ids, tt.wantIDs)
			}
			if tt.wantErr == nil && calls != len(tt.pages) {
				t.Fatalf("%d calls for %d pages", calls, len(tt.pages))
			}
		})
	}
}

func TestDeleteSnapshot(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
		wantErr error
	}{
		{"ok", reply(http.StatusNoContent, ""), nil},
		{"unknown", reply(http.StatusNotFound, `{"code":404,"message":"template or snapshot 'snap1' not found"}`), ErrNotFound},
		{"a template", reply(http.StatusNotImplemented, `{"code":501,"message":"use moat template"}`), ErrNotImplemented},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gotID := ""
			c := fakeAPI(t, map[string]http.HandlerFunc{
				"DELETE /templates/{id}": func(w http.ResponseWriter, r *http.Request) {
					gotID = r.PathValue("id")
					tt.handler(w, r)
				},
			})
			checkErr(t, c.DeleteSnapshot(context.Background(), "snap1"), tt.wantErr)
			if gotID != "snap1" {
				t.Fatalf("deleted %q", gotID)
			}
		})
	}
}
