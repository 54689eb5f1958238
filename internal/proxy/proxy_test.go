package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"
)

type fakeSandbox struct {
	token, state string
	autoResume   bool
	wakeErr      error
	wakes        *int
}

type fakeResolver map[string]fakeSandbox

func (f fakeResolver) Lookup(id string) (Target, bool) {
	e, ok := f[id]
	return Target{Addr: netip.MustParseAddr("127.0.0.1"), Token: e.token, State: e.state, AutoResume: e.autoResume}, ok
}

func (f fakeResolver) Wake(ctx context.Context, id string) (Target, error) {
	e := f[id]
	if e.wakes != nil {
		*e.wakes++
	}
	if e.wakeErr != nil {
		return Target{}, e.wakeErr
	}
	e.state = "running"
	f[id] = e
	t, _ := f.Lookup(id)
	t.Gen = 1
	return t, nil
}

func portOf(t *testing.T, ts *httptest.Server) int {
	_, p, _ := net.SplitHostPort(ts.Listener.Addr().String())
	n, _ := strconv.Atoi(p)
	return n
}

func closedPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

func TestParseHost(t *testing.T) {
	tests := []struct {
		host, domain string
		port         int
		id           string
		ok           bool
	}{
		{"49983-iabc.moat.local", "", 49983, "iabc", true},
		{"49983-iabc-6532622b.moat.local:3000", "", 49983, "iabc", true},
		{"3000-iabc.moat.local", "moat.local", 3000, "iabc", true},
		{"3000-iabc.other", "moat.local", 0, "", false},
		{"127.0.0.1:3000", "", 0, "", false},
		{"localhost", "", 0, "", false},
		{"abc-iabc.x", "", 0, "", false},
		{"0-iabc.x", "", 0, "", false},
		{"70000-iabc.x", "", 0, "", false},
		{"80-IABC.x", "", 0, "", false},
		{"80-a-b-c.x", "", 0, "", false},
		{"80-iabc.", "", 0, "", false},
	}
	for _, tt := range tests {
		port, id, ok := ParseHost(tt.host, tt.domain)
		if port != tt.port || id != tt.id || ok != tt.ok {
			t.Errorf("ParseHost(%q) = %d %q %v", tt.host, port, id, ok)
		}
	}
}

type result struct {
	status int
	body   map[string]any
	raw    string
}

func send(t *testing.T, h http.Handler, req *http.Request) result {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	r := result{status: rec.Code, raw: rec.Body.String()}
	if strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		_ = json.Unmarshal(rec.Body.Bytes(), &r.body)
	}
	return r
}

// notFound checks the body of E2B's answer for a sandbox that does not run.
func notFound(id string) func(*testing.T, result) {
	return func(t *testing.T, r result) {
		t.Helper()
		if r.body["sandboxId"] != id || r.body["message"] != "The sandbox was not found" || r.body["code"] != 502.0 {
			t.Fatalf("body %v", r.body)
		}
	}
}

func TestProxy(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-KEY") != "" {
			w.WriteHeader(http.StatusTeapot)
			return
		}
		io.WriteString(w, "ok "+r.Method+" "+r.URL.RequestURI())
	}))
	defer backend.Close()
	bport := portOf(t, backend)
	closed := closedPort(t)
	wakes := 0
	res := fakeResolver{"isecure": {token: "tok", state: "running"}, "iopen": {state: "running"},
		"ipaused": {state: "paused"}, "iauto": {state: "paused", autoResume: true, wakes: &wakes},
		"iautofail": {state: "paused", autoResume: true, wakeErr: errors.New("boom")}}
	p := New(Config{Resolver: res, EnvdPort: bport})

	hdr := func(method, path, id string, port int, token string) *http.Request {
		req := httptest.NewRequest(method, path, nil)
		req.Header.Set(HeaderSandboxID, id)
		req.Header.Set(HeaderSandboxPort, strconv.Itoa(port))
		req.Header.Set("X-API-KEY", "e2b_secret")
		if token != "" {
			req.Header.Set(HeaderAccessToken, token)
		}
		return req
	}
	byHost := httptest.NewRequest("GET", "/x?y=1", nil)
	byHost.Host = strconv.Itoa(bport) + "-iopen-6532622b.moat.test:3000"
	byBadHost := httptest.NewRequest("GET", "/health", nil)
	byBadHost.Host = strconv.Itoa(bport) + "-i_x.moat.test:3000"
	onlyID := httptest.NewRequest("GET", "/", nil)
	onlyID.Header.Set(HeaderSandboxID, "iopen")
	badPort := hdr("GET", "/", "iopen", 1, "")
	badPort.Header.Set(HeaderSandboxPort, "http")

	tests := []struct {
		name   string
		req    *http.Request
		status int
		check  func(t *testing.T, r result)
	}{
		{"forward by headers", hdr("POST", "/process.Process/Start?a=b", "iopen", bport, ""), 200, func(t *testing.T, r result) {
			if r.raw != "ok POST /process.Process/Start?a=b" {
				t.Fatalf("body %q", r.raw)
			}
		}},
		{"forward by host", byHost, 200, nil},
		{"unknown sandbox", hdr("GET", "/health", "inope", bport, ""), 502, func(t *testing.T, r result) {
			if r.body["sandboxId"] != "inope" || r.body["message"] != "The sandbox was not found" || r.body["code"] != 502.0 {
				t.Fatalf("body %v", r.body)
			}
		}},
		{"paused sandbox", hdr("GET", "/health", "ipaused", bport, ""), 502, nil},
		{"paused sandbox with auto-resume is woken", hdr("GET", "/health", "iauto", bport, ""), 200, func(t *testing.T, r result) {
			if wakes != 1 {
				t.Fatalf("wakes = %d, want 1", wakes)
			}
		}},
		{"auto-resume that fails", hdr("GET", "/health", "iautofail", bport, ""), 502, nil},
		{"closed port", hdr("GET", "/", "iopen", closed, ""), 502, func(t *testing.T, r result) {
			if r.body["message"] != "The sandbox is running but port is not open" || r.body["port"] != float64(closed) {
				t.Fatalf("body %v", r.body)
			}
		}},
		{"internal envd path", hdr("POST", "/init", "iopen", bport, ""), 404, nil},
		{"internal freeze", hdr("POST", "/freeze", "iopen", bport, ""), 404, nil},
		{"secure without token", hdr("POST", "/filesystem.Filesystem/ListDir", "isecure", bport, ""), 401, nil},
		{"secure wrong token", hdr("POST", "/filesystem.Filesystem/ListDir", "isecure", bport, "nope"), 401, nil},
		{"secure right token", hdr("POST", "/filesystem.Filesystem/ListDir", "isecure", bport, "tok"), 200, nil},
		{"secure files (signature)", hdr("GET", "/files?path=/a", "isecure", bport, ""), 200, nil},
		{"secure health", hdr("GET", "/health", "isecure", bport, ""), 200, nil},
		{"token not needed on other ports", hdr("GET", "/", "isecure", closed, ""), 502, nil},
		{"only id header", onlyID, 400, nil},
		{"bad port header", badPort, 400, nil},
		// A malformed ID is answered exactly like an unknown one.
		{"bad id header", hdr("GET", "/", "I-N-V", bport, ""), 502, notFound("I")},
		{"path-escaping id header", hdr("GET", "/health", "../etc", bport, ""), 502, notFound("../etc")},
		{"bad id in host", byBadHost, 502, notFound("i_x")},
	}
	if !p.Match(byBadHost) {
		t.Fatal("a host shaped like sandbox traffic must be sandbox traffic")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := send(t, p, tt.req)
			if r.status != tt.status {
				t.Fatalf("status %d want %d: %s", r.status, tt.status, r.raw)
			}
			if tt.check != nil {
				tt.check(t, r)
			}
		})
	}
	if !p.Match(byHost) || !p.Match(onlyID) || p.Match(httptest.NewRequest("GET", "/v2/sandboxes", nil)) {
		t.Fatal("Match")
	}
}

func TestProxyStreams(t *testing.T) {
	release := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "second\n")
	}))
	defer backend.Close()
	p := New(Config{Resolver: fakeResolver{"iopen": {state: "running"}}})
	front := httptest.NewServer(p)
	defer front.Close()
	defer close(release)
	req, _ := http.NewRequest("GET", front.URL+"/stream", nil)
	req.Header.Set(HeaderSandboxID, "iopen")
	req.Header.Set(HeaderSandboxPort, strconv.Itoa(portOf(t, backend)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(resp.Body).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if s != "first\n" {
			t.Fatalf("got %q", s)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("first chunk not flushed through the proxy")
	}
}

// TestProxyErrorExplainsNetwork: a request whose upstream connection
// breaks (not a refusal) is logged with Config.Explain's account of the
// sandbox's address, so that a dial that timed out can be told apart
// later (route, device, neighbour).
func TestProxyErrorExplainsNetwork(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close() // accepted, then gone: not ECONNREFUSED
		}
	}()
	var log strings.Builder
	var asked []netip.Addr
	p := New(Config{Resolver: fakeResolver{"iopen": {state: "running"}}, EnvdPort: l.Addr().(*net.TCPAddr).Port,
		Logger:  slog.New(slog.NewTextHandler(&log, nil)),
		Explain: func(a netip.Addr) string { asked = append(asked, a); return "route to it via lo" }})
	req := httptest.NewRequest("GET", "/health", nil)
	req.Header.Set(HeaderSandboxID, "iopen")
	req.Header.Set(HeaderSandboxPort, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadGateway {
		t.Fatalf("status %d, want 502: %s", rec.Code, rec.Body)
	}
	if len(asked) != 1 || asked[0] != netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("Explain asked for %v, want 127.0.0.1 once", asked)
	}
	if !strings.Contains(log.String(), `network="route to it via lo"`) {
		t.Fatalf("the log lacks the explanation: %s", log.String())
	}
}
