package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/moatsh/moat/api/envd/process"
	"github.com/moatsh/moat/api/envd/process/processconnect"
	"github.com/moatsh/moat/api/rest"
	"github.com/moatsh/moat/internal/envd/files"
	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/envd/users"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errconnect"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/orchestrator/orchestratortest"
	"github.com/moatsh/moat/internal/proxy"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/server"
	"github.com/moatsh/moat/internal/store"
)

// leakRE matches what must never reach a client: host paths, sandbox and
// link-local addresses, console and log tails.
var leakRE = regexp.MustCompile(`/var/lib|/run/|/tmp|/srv/|\b10\.\d+\.\d+\.\d+|169\.254\.|fd6d:|127\.0\.0\.1|(?i:console)|SECRET`)

// hostErr is a failure of kind as it reaches a handler: wrapped with every
// host detail the layers below collect on the way up.
func hostErr(kind error) error {
	return fmt.Errorf("crun create at /var/lib/moat/sandboxes/x/rootfs via /run/moat/x.sock on 10.11.0.9 "+
		"(169.254.169.254, fd6d::1): console tail: SECRET kernel panic: %w", kind)
}

// checkErrBody checks an E2B error body: status, code and message.
func checkErrBody(t *testing.T, what string, status int, body []byte, wantStatus int, wantMsg string) {
	t.Helper()
	var e rest.Error // the body errhttp writes is the contract's Error
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("%s: body %q: %v", what, body, err)
	}
	if status != wantStatus || int(e.Code) != wantStatus || e.Message != wantMsg {
		t.Fatalf("%s: status %d body %s, want %d %q", what, status, body, wantStatus, wantMsg)
	}
}

// envdStub is envd's /files (the real handler) and a process service whose
// List fails, both failing with the error in err.
type envdStub struct {
	processconnect.UnimplementedProcessHandler
	mu  sync.Mutex
	err error
}

func (s *envdStub) fail() error   { s.mu.Lock(); defer s.mu.Unlock(); return s.err }
func (s *envdStub) set(err error) { s.mu.Lock(); s.err = err; s.mu.Unlock() }

func (s *envdStub) List(context.Context, *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	return nil, errconnect.ToConnect(s.fail())
}

// oneSandbox resolves every well-formed ID to a running sandbox at 127.0.0.1.
type oneSandbox struct{}

func (oneSandbox) Lookup(string) (proxy.Target, bool) {
	return proxy.Target{Addr: netip.MustParseAddr("127.0.0.1"), State: "running"}, true
}
func (oneSandbox) Wake(context.Context, string) (proxy.Target, error) {
	return proxy.Target{}, errdefs.ErrNotImplemented
}

// startEnvd serves envdStub behind the real proxy; it returns the proxy's
// URL and envd's port.
func startEnvd(t *testing.T, stub *envdStub) (front string, port int, home string) {
	t.Helper()
	home = t.TempDir()
	mux := http.NewServeMux()
	mux.Handle("/files", files.New(files.Config{State: state.New(nil), Users: users.NewHostResolver(home),
		Chown: func(string, *users.User) error { return stub.fail() }}))
	mux.Handle(processconnect.NewProcessHandler(stub))
	envd := httptest.NewServer(mux)
	t.Cleanup(envd.Close)
	_, p, _ := net.SplitHostPort(envd.Listener.Addr().String())
	port, _ = strconv.Atoi(p)
	px := httptest.NewServer(proxy.New(proxy.Config{Resolver: oneSandbox{}, EnvdPort: port}))
	t.Cleanup(px.Close)
	return px.URL, port, home
}

// TestErrorKindsEverywhere walks every kind through the REST API, envd's
// /files and a Connect service (both through the sandbox proxy) and checks
// each answers the status of errhttp's one table (Connect: errconnect's
// code, and back to the kind) with a message free of host details.
func TestErrorKindsEverywhere(t *testing.T) {
	h := newHarness(t)
	stub := &envdStub{}
	front, port, home := startEnvd(t, stub)
	pc := processconnect.NewProcessClient(http.DefaultClient, front, connect.WithProtoJSON())
	for i, kind := range errdefs.Kinds() {
		t.Run(kind.Error(), func(t *testing.T) {
			status, generic := errhttp.ToHTTP(kind), errhttp.Generic(kind)

			h.env.Runtime.CreateF = func(runtime.Spec) error { return hostErr(kind) }
			r := h.do("POST", "/v2/sandboxes", `{"templateID":"base","timeout":60}`)
			checkErrBody(t, "REST", r.status, r.body, status, generic)

			stub.set(hostErr(kind))
			dir := filepath.Join(home, "k"+strconv.Itoa(i))
			code, body := proxied(t, front, port, "POST", "/files?path="+url.QueryEscape(filepath.Join(dir, "f")))
			// The one public part is the sandbox path the client sent.
			checkErrBody(t, "envd /files", code, body, status, "chown directory '"+dir+"'")
			if leakRE.Match(bytes.ReplaceAll(body, []byte(dir), nil)) {
				t.Fatalf("envd /files leaks: %s", body)
			}

			// envd's Connect texts are its own (they name only what is in
			// the sandbox); the kind survives the round trip.
			stub.set(fmt.Errorf("list processes: %w", kind))
			creq := connect.NewRequest(&process.ListRequest{})
			creq.Header().Set(proxy.HeaderSandboxID, "iwalk")
			creq.Header().Set(proxy.HeaderSandboxPort, strconv.Itoa(port))
			_, err := pc.List(context.Background(), creq)
			want := connect.CodeOf(errconnect.ToConnect(kind))
			if got := connect.CodeOf(err); got != want {
				t.Fatalf("Connect: code %v, want %v (%v)", got, want, err)
			}
			back := kind
			if kind == errdefs.ErrNoSpace { // shares resource_exhausted
				back = errdefs.ErrResourceExhausted
			}
			if !errors.Is(errconnect.ToNative(err), back) {
				t.Fatalf("Connect: %v is not %v", errconnect.ToNative(err), back)
			}
		})
	}
}

// TestErrorBodiesHideHostDetails provokes real failures in the REST API,
// the proxy and envd's /files and checks that no body names a host path,
// an address or a log tail.
func TestErrorBodiesHideHostDetails(t *testing.T) {
	env := orchestratortest.New(t, orchestrator.Config{MaxTimeout: time.Hour, ReadyTimeout: 300 * time.Millisecond})
	key, err := env.DB.CreateAPIKey(context.Background(), store.DefaultTeam)
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(server.New(server.Config{Store: env.DB, Orch: env.Orch}))
	t.Cleanup(api.Close)
	h := &harness{t: t, url: api.URL, key: key, env: env}
	var bodies [][2]string
	keep := func(what string, status int, body []byte) {
		if status < 400 {
			t.Fatalf("%s: status %d, want a failure", what, status)
		}
		bodies = append(bodies, [2]string{what, strings.TrimSpace(string(body))})
	}
	rest := func(what, method, path, body string, setup func()) {
		env.Runtime.CreateF = nil
		env.Runtime.SetHealthy(true)
		env.Runtime.SetInitStatus(0)
		if setup != nil {
			setup()
		}
		r := h.do(method, path, body)
		keep(what, r.status, r.body)
	}
	create := `{"templateID":"base","timeout":60}`
	rest("unknown template", "POST", "/v2/sandboxes", `{"templateID":"nope","timeout":60}`, nil)
	rest("escaping template", "POST", "/v2/sandboxes", `{"templateID":"../../../etc","timeout":60}`, nil)
	rest("create fails with a console tail", "POST", "/v2/sandboxes", create, func() {
		env.Runtime.CreateF = func(runtime.Spec) error { return hostErr(errdefs.ErrUnavailable) }
	})
	rest("create fails without a kind", "POST", "/v2/sandboxes", create, func() {
		env.Runtime.CreateF = func(runtime.Spec) error { return errors.New("mount /var/lib/moat/x: SECRET") }
	})
	rest("envd unreachable", "POST", "/v2/sandboxes", create, func() { env.Runtime.SetHealthy(false) })
	rest("envd init fails", "POST", "/v2/sandboxes", create, func() { env.Runtime.SetInitStatus(http.StatusInternalServerError) })
	rest("envd init refuses", "POST", "/v2/sandboxes", create, func() { env.Runtime.SetInitStatus(http.StatusUnauthorized) })
	rest("malformed ID", "GET", "/sandboxes/..%2F..%2Fetc", "", nil)
	rest("bad body", "POST", "/v2/sandboxes", `{"templateID":`, nil)

	stub := &envdStub{}
	front, port, _ := startEnvd(t, stub)
	envdReq := func(what, method, path, user string) {
		code, b := proxied(t, front, port, method, path)
		keep(what, code, b)
	}
	envdReq("download of a missing file", "GET", "/files?path=/nonexistent/f", "")
	envdReq("upload under a file", "POST", "/files?path=/dev/null/x", "")
	envdReq("upload as an unknown user", "POST", "/files?path=/x&username=nobody-here", "")
	envdReq("upload without a path", "POST", "/files", "")

	// The proxy: a closed port, and a sandbox that drops the connection
	// (the transport error names its address).
	closed := httptest.NewServer(http.NotFoundHandler())
	closedPort := closed.Listener.Addr().(*net.TCPAddr).Port
	closed.Close()
	drop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, _ := w.(http.Hijacker).Hijack()
		c.Close()
	}))
	t.Cleanup(drop.Close)
	for what, p := range map[string]int{"closed port": closedPort, "dropped connection": drop.Listener.Addr().(*net.TCPAddr).Port} {
		code, b := proxied(t, front, p, "GET", "/")
		keep("proxy "+what, code, b)
	}

	for _, b := range bodies {
		if leakRE.MatchString(b[1]) {
			t.Errorf("%s leaks: %s", b[0], b[1])
		} else {
			t.Logf("%s: %s", b[0], b[1])
		}
	}
}

// proxied sends method path (body "x", as an upload) through the proxy at
// front to port of sandbox "iwalk" and returns the status and body.
func proxied(t *testing.T, front string, port int, method, path string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, front+path, strings.NewReader("x"))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set(proxy.HeaderSandboxID, "iwalk")
	req.Header.Set(proxy.HeaderSandboxPort, strconv.Itoa(port))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// TestNoRawStatuses: the server's handlers answer errors through their
// kinds (s.fail, errhttp.WriteError), so one table decides every status;
// only the transport's own statuses, which no kind has (405, 413), are
// written directly.
func TestNoRawStatuses(t *testing.T) {
	raw := regexp.MustCompile(`errhttp\.Write\(\w+, http\.Status(\w+)`)
	allowed := map[string]bool{"MethodNotAllowed": true, "RequestEntityTooLarge": true}
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range raw.FindAllStringSubmatch(string(b), -1) {
			if !allowed[m[1]] {
				t.Errorf("%s writes Status%s directly: return an error kind (errdefs) instead", p, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
