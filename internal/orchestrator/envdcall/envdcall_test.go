package envdcall

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/moatsh/moat/api/envd/process"
	"github.com/moatsh/moat/api/envd/process/processconnect"
	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
)

// waiter is the runtime's Wait: exit, when set, is how the sandbox's
// process ends at once; otherwise it runs until ctx ends.
type waiter struct{ exit error }

func (w waiter) Wait(ctx context.Context, id string) (runtime.ExitStatus, error) {
	if w.exit != nil {
		if errors.Is(w.exit, errdefs.ErrNotFound) {
			return runtime.ExitStatus{}, w.exit
		}
		return runtime.ExitStatus{Code: 1}, nil
	}
	<-ctx.Done()
	return runtime.ExitStatus{}, ctx.Err()
}

// serve starts h as envd and returns a Client for it and envd's address.
func serve(t *testing.T, h http.Handler, w waiter, readyTimeout time.Duration) (*Client, netip.Addr) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())
	c := &Client{HTTP: srv.Client(), Port: port, ReadyTimeout: readyTimeout,
		Log: slog.New(slog.DiscardHandler), Waiter: w}
	return c, netip.MustParseAddr(u.Hostname())
}

// allKinds are the kinds errdefs defines, and the context's.
var allKinds = []error{errdefs.ErrNotFound, errdefs.ErrAlreadyExists, errdefs.ErrInvalidArgument,
	errdefs.ErrFailedPrecondition, errdefs.ErrConflict, errdefs.ErrUnauthenticated, errdefs.ErrPermissionDenied,
	errdefs.ErrResourceExhausted, errdefs.ErrNoSpace, errdefs.ErrUnavailable, errdefs.ErrNotImplemented,
	errdefs.ErrInternal, context.DeadlineExceeded, context.Canceled}

func TestFromEnvd(t *testing.T) {
	kept := map[error]bool{errdefs.ErrUnavailable: true, errdefs.ErrResourceExhausted: true, errdefs.ErrNoSpace: true,
		errdefs.ErrNotImplemented: true, errdefs.ErrInternal: true, context.DeadlineExceeded: true, context.Canceled: true}
	for _, k := range allKinds {
		got := FromEnvd(fmt.Errorf("envd said: %w", k))
		want := k
		if !kept[k] {
			want = errdefs.ErrInternal // envd blames its caller: the orchestrator
		}
		if !errors.Is(got, want) || (!kept[k] && errors.Is(got, k)) {
			t.Errorf("FromEnvd(%v) = %v, want kind %v only", k, got, want)
		}
	}
}

func TestInitMapsEnvdStatus(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   error // nil: accepted
	}{
		{http.StatusNoContent, nil},
		{http.StatusOK, nil},
		{http.StatusBadRequest, errdefs.ErrInternal},
		{http.StatusUnauthorized, errdefs.ErrInternal},
		{http.StatusNotFound, errdefs.ErrInternal},
		{http.StatusTooManyRequests, errdefs.ErrResourceExhausted},
		{http.StatusInternalServerError, errdefs.ErrInternal},
		{http.StatusBadGateway, errdefs.ErrUnavailable},
		{http.StatusServiceUnavailable, errdefs.ErrUnavailable},
		{http.StatusInsufficientStorage, errdefs.ErrNoSpace},
	} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			mux := http.NewServeMux()
			mux.HandleFunc("POST /init", func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
			})
			c, addr := serve(t, mux, waiter{}, 5*time.Second)
			err := c.Init(context.Background(), addr, store.Sandbox{ID: "s1"}, store.TemplateConfig{}, "")
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("status %d: err %v, want kind %v", tc.status, err, tc.want)
			}
		})
	}
}

func TestInitRequest(t *testing.T) {
	var got state.Init
	var token string
	mux := http.NewServeMux()
	mux.HandleFunc("POST /init", func(w http.ResponseWriter, r *http.Request) {
		token = r.Header.Get("X-Access-Token")
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Error(err)
		}
		w.WriteHeader(http.StatusNoContent)
	})
	c, addr := serve(t, mux, waiter{}, 5*time.Second)
	sb := store.Sandbox{ID: "s1", TemplateID: "t1", Secure: true, EnvdAccessToken: "new",
		EnvVars: map[string]string{"A": "sandbox", "B": "b"}}
	tc := store.TemplateConfig{Env: map[string]string{"A": "template", "C": "c"}, User: "root"}
	if err := c.Init(context.Background(), addr, sb, tc, "old"); err != nil {
		t.Fatal(err)
	}
	wantEnv := map[string]string{"A": "sandbox", "B": "b", "C": "c"}
	if token != "old" || got.AccessToken == nil || *got.AccessToken != "new" || fmt.Sprint(got.EnvVars) != fmt.Sprint(wantEnv) ||
		got.DefaultUser != "root" || got.DefaultWorkdir != "/root" || got.Internal["E2B_SANDBOX_ID"] != "s1" ||
		got.Internal["E2B_TEMPLATE_ID"] != "t1" {
		t.Fatalf("init with token %q: %+v", token, got)
	}
}

// startingEnvd is an envd that drops /init's connection and answers
// /health 503 until ready is called.
type startingEnvd struct {
	mu     sync.Mutex
	up     bool
	inits  int
	health int
}

func (e *startingEnvd) ready() { e.mu.Lock(); e.up = true; e.mu.Unlock() }

func (e *startingEnvd) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.health++
		if !e.up {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /init", func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		up := e.up
		e.inits++
		e.mu.Unlock()
		if !up {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

func TestInitWaitsForEnvd(t *testing.T) {
	e := &startingEnvd{}
	c, addr := serve(t, e.handler(), waiter{}, 10*time.Second)
	time.AfterFunc(100*time.Millisecond, e.ready)
	if err := c.Init(context.Background(), addr, store.Sandbox{ID: "s1"}, store.TemplateConfig{}, ""); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inits != 2 || e.health < 2 {
		t.Fatalf("/init posted %d times, /health asked %d times; want 2 and more than once", e.inits, e.health)
	}
}

func TestInitGivesUp(t *testing.T) {
	for _, tc := range []struct {
		name    string
		w       waiter
		timeout time.Duration
	}{
		{"envd never ready", waiter{}, 300 * time.Millisecond},
		{"the runtime no longer knows the sandbox: wait on", waiter{exit: errdefs.ErrNotFound}, 300 * time.Millisecond},
		{"the sandbox exited", waiter{exit: errors.New("exited")}, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, addr := serve(t, (&startingEnvd{}).handler(), tc.w, tc.timeout)
			err := c.Init(context.Background(), addr, store.Sandbox{ID: "s1"}, store.TemplateConfig{}, "")
			if !errors.Is(err, errdefs.ErrUnavailable) {
				t.Fatalf("err %v, want unavailable", err)
			}
			// A dead sandbox ends the wait at once, not at the timeout (a
			// minute): the error says which ended it.
			if wantExited := tc.w.exit != nil && !errors.Is(tc.w.exit, errdefs.ErrNotFound); wantExited != strings.Contains(err.Error(), "exited") {
				t.Fatalf("err %v: exit seen %v, want %v", err, !wantExited, wantExited)
			}
		})
	}
}

func TestDisk(t *testing.T) {
	for _, tc := range []struct {
		name        string
		status      int
		body        string
		used, total uint64
		want        error // nil: the figures; errAny: some error
	}{
		{"figures", http.StatusOK, `{"disk_used":3,"disk_total":8}`, 3, 8, nil},
		{"no figures", http.StatusOK, `{}`, 0, 0, errAny},
		{"bad token", http.StatusUnauthorized, ``, 0, 0, errdefs.ErrInternal},
		{"busy", http.StatusServiceUnavailable, ``, 0, 0, errdefs.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("X-Access-Token") != "tok" {
					w.WriteHeader(http.StatusUnauthorized)
					return
				}
				w.WriteHeader(tc.status)
				fmt.Fprint(w, tc.body)
			})
			c, addr := serve(t, mux, waiter{}, time.Second)
			token := "tok"
			if tc.status == http.StatusUnauthorized {
				token = "wrong"
			}
			used, total, err := c.Disk(context.Background(), addr, token)
			switch {
			case tc.want == nil && (err != nil || used != tc.used || total != tc.total):
				t.Fatalf("disk %d/%d, %v; want %d/%d", used, total, err, tc.used, tc.total)
			case tc.want != nil && (err == nil || (tc.want != errAny && !errors.Is(err, tc.want))):
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}

// errAny stands for any error.
var errAny = errors.New("any error")

// failingProcess refuses every Start with code.
type failingProcess struct {
	processconnect.UnimplementedProcessHandler
	code connect.Code
}

func (f failingProcess) Start(context.Context, *connect.Request[process.StartRequest], *connect.ServerStream[process.StartResponse]) error {
	return connect.NewError(f.code, errors.New("refused"))
}

func TestStartTemplateCmdMapsEnvdErrors(t *testing.T) {
	for _, tc := range []struct {
		code connect.Code
		want error
	}{
		{connect.CodeInvalidArgument, errdefs.ErrInternal},
		{connect.CodeUnauthenticated, errdefs.ErrInternal},
		{connect.CodeResourceExhausted, errdefs.ErrResourceExhausted},
		{connect.CodeUnavailable, errdefs.ErrUnavailable},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			mux := http.NewServeMux()
			mux.Handle(processconnect.NewProcessHandler(failingProcess{code: tc.code}))
			c, addr := serve(t, mux, waiter{}, time.Second)
			err := c.StartTemplateCmd(context.Background(), addr, store.Sandbox{ID: "s1"},
				store.TemplateConfig{StartCmd: "sleep 1"}, "")
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}

// TestInitEgressCA: a sandbox with header rules sends the CA and needs
// envd to confirm it installed it: an envd that ignores the field (an
// older template's) fails the /init with ErrNotImplemented, never a
// sandbox that would distrust the proxy. One without header rules sends
// nothing.
func TestInitEgressCA(t *testing.T) {
	ruled := store.Sandbox{ID: "s1", Network: store.Network{Rules: []store.NetworkRule{
		{Domain: "a.example.com", Headers: map[string]string{"X": "y"}}}}}
	for _, tc := range []struct {
		name    string
		sb      store.Sandbox
		confirm bool
		want    error
		sent    bool
	}{
		{"confirmed", ruled, true, nil, true},
		{"old envd", ruled, false, errdefs.ErrNotImplemented, true},
		{"no header rules", store.Sandbox{ID: "s2", Network: store.Network{Rules: []store.NetworkRule{{Domain: "a.example.com"}}}},
			false, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got state.Init
			mux := http.NewServeMux()
			mux.HandleFunc("POST /init", func(w http.ResponseWriter, r *http.Request) {
				json.NewDecoder(r.Body).Decode(&got)
				if tc.confirm {
					w.Header().Set(state.EgressCAHeader, state.EgressCAInstalled)
				}
				w.WriteHeader(http.StatusNoContent)
			})
			c, addr := serve(t, mux, waiter{}, 5*time.Second)
			c.EgressCA = []byte("PEM")
			err := c.Init(context.Background(), addr, tc.sb, store.TemplateConfig{}, "")
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("err %v, want kind %v", err, tc.want)
			}
			if (got.EgressCA == "PEM") != tc.sent {
				t.Fatalf("CA sent = %v, want %v", got.EgressCA != "", tc.sent)
			}
		})
	}
}

// TestInitRetryAfterLostAnswer plays a loaded host: envd applies the first
// /init (taking the sandbox's new access token) but its answer never
// arrives. The retry must then prove the new token, which envd demands,
// instead of failing with envd's 401.
func TestInitRetryAfterLostAnswer(t *testing.T) {
	for _, current := range []string{"", "old-token"} {
		t.Run("current="+current, func(t *testing.T) {
			var mu sync.Mutex
			token, inits := current, 0
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				switch r.URL.Path {
				case "/health":
					w.WriteHeader(http.StatusNoContent)
				case "/init":
					inits++
					if token != "" && r.Header.Get("X-Access-Token") != token {
						http.Error(w, `{"code":401,"message":"unauthorized"}`, http.StatusUnauthorized)
						return
					}
					var in state.Init
					_ = json.NewDecoder(r.Body).Decode(&in)
					if in.AccessToken != nil {
						token = *in.AccessToken
					}
					if inits == 1 { // applied, then the connection drops before the answer
						conn, _, err := w.(http.Hijacker).Hijack()
						if err == nil {
							conn.Close()
						}
						return
					}
					w.WriteHeader(http.StatusNoContent)
				}
			})
			c, addr := serve(t, h, waiter{}, 10*time.Second)
			sb := store.Sandbox{ID: "s1", Secure: true, EnvdAccessToken: "new-token"}
			if err := c.Init(context.Background(), addr, sb, store.TemplateConfig{}, current); err != nil {
				t.Fatalf("Init after a lost answer: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if token != "new-token" || inits != 3 {
				t.Fatalf("envd holds token %q after %d /init requests; want new-token after 3 (lost, refused, proved)", token, inits)
			}
		})
	}
}
