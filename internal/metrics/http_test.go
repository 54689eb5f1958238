package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/metrics/metricstest"
)

func TestOperation(t *testing.T) {
	for _, tc := range []struct {
		pattern, want string
		timed         bool
	}{
		{"POST /sandboxes", "create", true},
		{"POST /v2/sandboxes", "create", true},
		{"DELETE /sandboxes/{id}", "kill", true},
		{"POST /sandboxes/{id}/pause", "pause", true},
		{"POST /sandboxes/{id}/resume", "resume", true},
		{"POST /v2/sandboxes/{id}/connect", "connect", true},
		{"POST /sandboxes/{id}/snapshots", "snapshot", true},
		{"POST /sandboxes/{id}/fork", "fork", true},
		{"POST /v2/templates/{templateID}/builds/{buildID}", "build", true},
		{"GET /sandboxes/{id}", "get", false},
		{"GET /v2/sandboxes", "list", false},
		{"GET /health", "other", false},
		{"", "other", false},
	} {
		if got := Operation(tc.pattern); got != tc.want || Timed(got) != tc.timed {
			t.Errorf("Operation(%q) = %q (timed %v), want %q (timed %v)", tc.pattern, got, Timed(got), tc.want, tc.timed)
		}
	}
}

func TestPortKind(t *testing.T) {
	for _, tc := range []struct {
		name, host, header, domain string
		want                       string
	}{
		{"header envd", "moat.example", "49983", "", "envd"},
		{"header other", "moat.example", "8080", "", "other"},
		{"host envd", "49983-abc123.moat.example", "", "moat.example", "envd"},
		{"host other", "3000-abc123.moat.example:443", "", "moat.example", "other"},
		{"host of another domain", "49983-abc123.other.example", "", "moat.example", "other"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Host = tc.host
		if tc.header != "" {
			r.Header.Set("E2b-Sandbox-Port", tc.header)
		}
		if got := PortKind(r, tc.domain, 49983); got != tc.want {
			t.Errorf("%s: PortKind = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestClassAndResult(t *testing.T) {
	for _, tc := range []struct {
		status        int
		class, result string
	}{
		{200, "2xx", "ok"}, {201, "2xx", "ok"}, {304, "3xx", "ok"}, {404, "4xx", "error"},
		{429, "4xx", "error"}, {503, "5xx", "error"}, {0, "other", "ok"},
	} {
		if c, r := class(tc.status), result(tc.status); c != tc.class || r != tc.result {
			t.Errorf("status %d: class %q result %q, want %q %q", tc.status, c, r, tc.class, tc.result)
		}
	}
}

// scrape serves m's handler and parses it.
func scrape(t *testing.T, m *Metrics) metricstest.Samples {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	s, err := metricstest.Parse(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAPI: the middleware reads the pattern the inner mux matched.
func TestAPI(t *testing.T) {
	m := New(Config{})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sandboxes", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("refuse") {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	mux.HandleFunc("DELETE /sandboxes/{id}", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /sandboxes/{id}", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("{}")) })
	h := m.API(mux)
	for _, req := range []struct{ method, path string }{
		{"POST", "/sandboxes"}, {"POST", "/sandboxes"}, {"POST", "/sandboxes?refuse"},
		{"DELETE", "/sandboxes/a"}, {"GET", "/sandboxes/a"}, {"GET", "/nowhere"},
	} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(req.method, req.path, nil))
	}
	s := scrape(t, m)
	k := metricstest.Key
	for key, want := range map[string]float64{
		k("moat_api_requests_total", "operation", "create", "code", "2xx"):                   2,
		k("moat_api_requests_total", "operation", "create", "code", "4xx"):                   1,
		k("moat_api_requests_total", "operation", "kill", "code", "2xx"):                     1,
		k("moat_api_requests_total", "operation", "get", "code", "2xx"):                      1,
		k("moat_api_requests_total", "operation", "other", "code", "4xx"):                    1,
		k("moat_operation_duration_seconds_count", "operation", "create", "result", "ok"):    2,
		k("moat_operation_duration_seconds_count", "operation", "create", "result", "error"): 1,
		k("moat_operation_duration_seconds_count", "operation", "kill", "result", "ok"):      1,
	} {
		if s[key] != want {
			t.Errorf("%s = %v, want %v", key, s[key], want)
		}
	}
	for key := range s {
		if strings.Contains(key, `operation="get"`) && strings.HasPrefix(key, "moat_operation_duration") {
			t.Errorf("a read is timed: %s", key)
		}
	}
}

func TestProxy(t *testing.T) {
	m := New(Config{Domain: "moat.example"})
	h := m.Proxy(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/gone" {
			w.WriteHeader(http.StatusBadGateway)
		}
		w.Write([]byte("hello"))
		if r.URL.Path == "/abort" { // as httputil.ReverseProxy when the client went away
			panic(http.ErrAbortHandler)
		}
	}))
	for _, req := range []struct{ host, path string }{
		{"49983-abc.moat.example", "/"}, {"49983-abc.moat.example", "/abort"}, {"8080-abc.moat.example", "/gone"},
	} {
		r := httptest.NewRequest(http.MethodGet, req.path, nil)
		r.Host = req.host
		func() {
			defer func() {
				if v := recover(); v != nil && v != http.ErrAbortHandler {
					panic(v)
				}
			}()
			h.ServeHTTP(httptest.NewRecorder(), r)
		}()
	}
	s := scrape(t, m)
	k := metricstest.Key
	for key, want := range map[string]float64{
		k("moat_proxy_requests_total", "port", "envd", "code", "2xx"):  2,
		k("moat_proxy_requests_total", "port", "other", "code", "5xx"): 1,
		k("moat_proxy_response_bytes_total", "port", "envd"):           10,
		k("moat_proxy_response_bytes_total", "port", "other"):          5,
	} {
		if s[key] != want {
			t.Errorf("%s = %v, want %v", key, s[key], want)
		}
	}
}

// TestNil: a nil *Metrics passes requests through.
func TestNil(t *testing.T) {
	var m *Metrics
	h := http.NotFoundHandler()
	if m.API(h) == nil || m.Proxy(h) == nil {
		t.Fatal("nil Metrics lost the handler")
	}
}

// TestUnwrap: a flush through the wrapper reaches the connection.
func TestUnwrap(t *testing.T) {
	rec := httptest.NewRecorder()
	cw := &countingWriter{ResponseWriter: rec}
	if err := http.NewResponseController(cw).Flush(); err != nil || !rec.Flushed {
		t.Fatalf("flush through countingWriter: %v (flushed %v)", err, rec.Flushed)
	}
}
