package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/egress/tlsca"
	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/envd/truststore"
)

func newTestServer(t testing.TB) *Server {
	t.Helper()
	s, err := New(Config{HostMode: true, Home: t.TempDir(), Logger: slog.New(slog.DiscardHandler),
		Internal: map[string]string{"E2B_SANDBOX": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestNewNeedsHome(t *testing.T) {
	if _, err := New(Config{HostMode: true}); err == nil {
		t.Fatal("host mode without home accepted")
	}
}

func TestExempt(t *testing.T) {
	tests := []struct {
		method, path string
		want         bool
	}{
		{"GET", "/health", true}, {"POST", "/health", false}, {"GET", "/files", true},
		{"POST", "/files", true}, {"POST", "/init", true}, {"GET", "/init", false},
		{"GET", "/envs", false}, {"POST", "/process.Process/Start", false},
		{"POST", "/files/compose", false}, {"GET", "/files/compose", false},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(tt.method, tt.path, nil)
		if got := exempt(r); got != tt.want {
			t.Errorf("exempt(%s %s) = %v", tt.method, tt.path, got)
		}
	}
}

func TestRecoverPanics(t *testing.T) {
	s := newTestServer(t)
	h := s.recoverPanics(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), `"code":500`) {
		t.Fatalf("panic answer = %d %s", rec.Code, rec.Body)
	}
}

func TestMetricsParse(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("stat", "cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3\n")
	write("meminfo", "MemTotal: 1024 kB\nMemFree: 100 kB\nMemAvailable: 512 kB\nCached: 256 kB\n")
	m, err := newMetrics().collect(dir, "/")
	if err != nil {
		t.Fatal(err)
	}
	if m.CPUUsedPct != 20 || m.MemTotal != 1024<<10 || m.MemUsed != 512<<10 || m.MemCache != 256<<10 || m.DiskTotal == 0 {
		t.Fatalf("metrics = %+v", m)
	}
	write("stat", "intr 1 2\n")
	if _, err := newMetrics().collect(dir, "/"); err == nil {
		t.Fatal("garbage /proc/stat accepted")
	}
}

// TestComposeRoute: POST /files/compose is routed and, unlike /files, needs
// the access token header once one is set (E2B's authExcludedPaths lists
// only GET and POST /files); a signature does not stand in for it.
func TestComposeRoute(t *testing.T) {
	s := newTestServer(t)
	home := s.cfg.Home
	src := filepath.Join(home, "part")
	if err := os.WriteFile(src, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	tok := "secret"
	s.State().Apply(state.Init{AccessToken: &tok})
	body := `{"source_paths":["part"],"destination":"whole.txt","username":"user"}`
	tests := []struct {
		name, target, token string
		want                int
		wantBody            string
	}{
		{"no token", "/files/compose", "", 401, unauthorizedMsg},
		{"wrong token", "/files/compose", "nope", 401, unauthorizedMsg},
		{"signature instead", "/files/compose?signature=v1_x&username=user", "", 401, unauthorizedMsg},
		{"token", "/files/compose", tok, 200, `{"path":"` + filepath.Join(home, "whole.txt") + `","name":"whole.txt","type":"file"}`},
	}
	for _, tt := range tests {
		req := httptest.NewRequest("POST", tt.target, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if tt.token != "" {
			req.Header.Set("X-Access-Token", tt.token)
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		if rec.Code != tt.want || !strings.Contains(rec.Body.String(), tt.wantBody) {
			t.Fatalf("%s: %d %s", tt.name, rec.Code, rec.Body)
		}
	}
	if data, err := os.ReadFile(filepath.Join(home, "whole.txt")); err != nil || string(data) != "abc" {
		t.Fatalf("composed file = %q, %v", data, err)
	}
}

func TestInitInProcess(t *testing.T) {
	s := newTestServer(t)
	tests := []struct {
		name, body, token string
		want              int
	}{
		{"empty body", "", "", 204},
		{"set token", `{"accessToken":"t","envVars":{"X":"1"}}`, "", 204},
		{"missing token", `{}`, "", 401},
		{"same token", `{"timestamp":"2020-01-01T00:00:00Z"}`, "t", 204},
		{"bad json", `[`, "t", 400},
	}
	for _, tt := range tests {
		req := httptest.NewRequest("POST", "/init", strings.NewReader(tt.body))
		if tt.token != "" {
			req.Header.Set("X-Access-Token", tt.token)
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		if rec.Code != tt.want {
			t.Fatalf("%s: %d %s", tt.name, rec.Code, rec.Body)
		}
	}
	if s.State().Env()["X"] != "1" {
		t.Fatal("init env not applied")
	}
}

// An /init whose last field does not parse is 400 and applies none of the
// fields before it: bad input loses nothing.
func TestInitRejectedAppliesNothing(t *testing.T) {
	s := newTestServer(t)
	body := `{"envVars":{"W":"1"},"defaultUser":"nobody","defaultWorkdir":"/tmp","internal":{"E2B_SANDBOX_ID":"w"},"timestamp":"not a time"}`
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/init", strings.NewReader(body)))
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), `"code":400`) {
		t.Fatalf("/init with a bad timestamp = %d %s", rec.Code, rec.Body)
	}
	if env := s.State().Env(); env["W"] != "" || env["E2B_SANDBOX_ID"] != "" {
		t.Fatalf("a refused /init applied its env: %v", env)
	}
	if u := s.State().DefaultUser(); u == "nobody" {
		t.Fatal("a refused /init applied its default user")
	}
}

// TestInitEgressCA: an /init with moatEgressCA installs the CA in the
// trust store (host mode: under the home directory), says so in a header,
// and points processes started afterwards at it; a body that is not a CA
// certificate is 400 and changes nothing.
func TestInitEgressCA(t *testing.T) {
	s := newTestServer(t)
	ca, err := tlsca.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	post := func(body any) *httptest.ResponseRecorder {
		b, _ := json.Marshal(body)
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/init", bytes.NewReader(b)))
		return rec
	}
	if rec := post(map[string]any{"moatEgressCA": "not a certificate", "envVars": map[string]string{"A": "1"}}); rec.Code != 400 ||
		rec.Header().Get(state.EgressCAHeader) != "" || s.State().Env()["A"] != "" {
		t.Fatalf("bad CA: %d %s", rec.Code, rec.Body)
	}
	for i := 0; i < 2; i++ {
		rec := post(map[string]any{"moatEgressCA": string(ca.CertPEM())})
		if rec.Code != 204 || rec.Header().Get(state.EgressCAHeader) != state.EgressCAInstalled {
			t.Fatalf("install %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	env := s.State().Env()
	root := filepath.Join(s.cfg.Home, ".moat-truststore")
	bundle := filepath.Join(root, truststore.Bundle)
	if env["SSL_CERT_FILE"] != bundle || env["REQUESTS_CA_BUNDLE"] != bundle ||
		env["NODE_EXTRA_CA_CERTS"] != filepath.Join(root, truststore.CAFile) {
		t.Fatalf("env = %v", env)
	}
	if b, err := os.ReadFile(bundle); err != nil || !bytes.Equal(b, ca.CertPEM()) {
		t.Fatalf("bundle %q %v", b, err)
	}
	// A later /init without the field keeps the variables.
	if rec := post(map[string]any{"envVars": map[string]string{"B": "2"}}); rec.Code != 204 ||
		s.State().Env()["SSL_CERT_FILE"] != bundle {
		t.Fatalf("re-init: %d %v", rec.Code, s.State().Env())
	}
}

// FuzzConnectEnvelope feeds arbitrary bodies to a server-streaming RPC: envd
// must answer (no panic, no hang) within a bound.
func FuzzConnectEnvelope(f *testing.F) {
	env := func(flag byte, n uint32, p string) []byte {
		b := []byte{flag, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[1:], n)
		return append(b, p...)
	}
	f.Add(env(0, 31, `{"process":{"cmd":"/bin/true"}}`))
	f.Add([]byte{0, 0, 0})
	f.Add(env(0, 1000, `{}`))
	f.Add(env(2, 2, `{}`))
	f.Add(env(1, 2, `{}`))
	f.Add(env(0, 5, `{nope`))
	f.Add(env(0, 0xffffffff, ``))
	s := newTestServer(f)
	h := s.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		// Never run a real command: only bodies that cannot start one.
		if bytes.Contains(body, []byte("cmd")) {
			body = bytes.ReplaceAll(body, []byte("cmd"), []byte("xyz"))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, "POST", "/process.Process/Start", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/connect+json")
		req.Header.Set("Connect-Protocol-Version", "1")
		rec := httptest.NewRecorder()
		done := make(chan struct{})
		go func() { defer close(done); h.ServeHTTP(rec, req) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("no response within 10s for %q", body)
		}
		if rec.Code == 0 {
			t.Fatal("no status written")
		}
		_, _ = io.Copy(io.Discard, rec.Body)
	})
}
