package envd_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/envd/envdtest"
	"github.com/moatsh/moat/internal/envd/signature"
	"github.com/moatsh/moat/internal/envd/state"
)

const unauthorized = "unauthorized access, please provide a valid access token or method signing if supported"

func ptr[T any](v T) *T { return &v }

func TestInitAndTokenAuth(t *testing.T) {
	e := envdtest.Start(t, envdtest.WithEnv("MOAT_SANDBOX_ID=sbx1"))
	r := do(t, "POST", e.URL+"/init", nil, strings.NewReader(`{"envVars":{"A":"1"},"accessToken":"tok","defaultUser":"user"}`))
	if r.Status != 204 || r.Header.Get("X-Envd-Version") == "" {
		t.Fatalf("init = %d %v %s", r.Status, r.Header, r.Body)
	}
	tok := map[string]string{"X-Access-Token": "tok"}
	bad := map[string]string{"X-Access-Token": "nope"}
	rpc := map[string]string{"Content-Type": "application/json"}
	tests := []struct {
		name, method, path string
		hdr                map[string]string
		body               string
		status             int
		msg                string
	}{
		{"health open", "GET", "/health", nil, "", 204, ""},
		{"envs no token", "GET", "/envs", nil, "", 401, unauthorized},
		{"envs wrong token", "GET", "/envs", bad, "", 401, unauthorized},
		{"metrics no token", "GET", "/metrics", nil, "", 401, unauthorized},
		{"rpc no token", "POST", "/filesystem.Filesystem/ListDir", rpc, `{"path":"/"}`, 401, unauthorized},
		{"stream rpc no token", "POST", "/process.Process/Start", map[string]string{"Content-Type": "application/connect+json"}, "", 401, unauthorized},
		{"unknown path no token", "GET", "/nope", nil, "", 401, unauthorized},
		{"unknown path", "GET", "/nope", tok, "", 404, "not found"},
		{"init without token", "POST", "/init", nil, `{}`, 401, unauthorized},
		{"init wrong token", "POST", "/init", bad, `{}`, 401, unauthorized},
		{"init bad body", "POST", "/init", tok, `{"envVars":`, 400, "invalid init body"},
		{"files no token", "GET", "/files?path=x", nil, "", 401, "missing signature query parameter"},
		{"files wrong token", "GET", "/files?path=x", bad, "", 401, "access token present in header but does not match"},
		{"files bad signature", "GET", "/files?path=x&signature=v1_abc", nil, "", 401, "invalid signature"},
		{"files wrong operation", "POST", "/files?path=x&signature=" + signature.Sign("x", "read", "", "tok", 0), map[string]string{"Content-Type": "application/octet-stream"}, "d", 401, "invalid signature"},
		{"files expired", "GET", "/files?path=x&signature_expiration=1000&signature=" + signature.Sign("x", "read", "", "tok", 1000), nil, "", 401, "signature is already expired"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body *strings.Reader
			if tt.body != "" {
				body = strings.NewReader(tt.body)
			}
			var r response
			if body != nil {
				r = do(t, tt.method, e.URL+tt.path, tt.hdr, body)
			} else {
				r = do(t, tt.method, e.URL+tt.path, tt.hdr, nil)
			}
			if r.Status != tt.status {
				t.Fatalf("status = %d, want %d; body %s", r.Status, tt.status, r.Body)
			}
			if tt.msg != "" {
				if msg := r.err(t).Message; !strings.Contains(msg, tt.msg) {
					t.Fatalf("message %q does not contain %q", msg, tt.msg)
				}
			}
		})
	}

	r = do(t, "GET", e.URL+"/envs", tok, nil)
	var env map[string]string
	if err := json.Unmarshal(r.Body, &env); err != nil || env["A"] != "1" || env["E2B_SANDBOX"] != "true" || env["E2B_SANDBOX_ID"] != "sbx1" {
		t.Fatalf("envs = %d %s", r.Status, r.Body)
	}

	// Signed URLs, as Sandbox.uploadUrl/downloadUrl build them.
	exp := time.Now().Add(time.Hour).Unix()
	up := "/files?path=s.txt&username=user&signature_expiration=" + strconv.FormatInt(exp, 10) +
		"&signature=" + url.QueryEscape(signature.Sign("s.txt", "write", "user", "tok", exp))
	entries(t, do(t, "POST", e.URL+up, map[string]string{"Content-Type": "application/octet-stream"}, strings.NewReader("signed")))
	down := "/files?path=s.txt&signature=" + url.QueryEscape(signature.Sign("s.txt", "read", "", "tok", 0))
	if r := do(t, "GET", e.URL+down, nil, nil); r.Status != 200 || string(r.Body) != "signed" {
		t.Fatalf("signed download = %d %s", r.Status, r.Body)
	}

	// A later /init with the token may change it.
	e.AccessToken = "tok"
	e.Init(t, state.Init{AccessToken: ptr("tok2")})
	if r := do(t, "GET", e.URL+"/envs", tok, nil); r.Status != 401 {
		t.Fatalf("old token still accepted: %d", r.Status)
	}
}

func TestMetrics(t *testing.T) {
	e := envdtest.Start(t)
	r := do(t, "GET", e.URL+"/metrics", nil, nil)
	var m map[string]float64
	if err := json.Unmarshal(r.Body, &m); err != nil || r.Status != 200 {
		t.Fatalf("metrics = %d %s", r.Status, r.Body)
	}
	for _, k := range []string{"ts", "cpu_count", "cpu_used_pct", "mem_total", "mem_used", "mem_cache", "mem_total_mib", "mem_used_mib", "disk_used", "disk_total"} {
		if _, ok := m[k]; !ok {
			t.Errorf("metrics lack %s", k)
		}
	}
	if m["mem_total"] <= 0 || m["disk_total"] <= 0 || m["cpu_count"] < 1 || m["mem_used"] > m["mem_total"] {
		t.Errorf("implausible metrics %v", m)
	}
}

func TestCORSAndNotFound(t *testing.T) {
	e := envdtest.Start(t)
	r := do(t, "OPTIONS", e.URL+"/process.Process/Start", map[string]string{
		"Origin": "https://example.com", "Access-Control-Request-Method": "POST",
		"Access-Control-Request-Headers": "content-type,x-access-token"}, nil)
	if r.Status != 204 || r.Header.Get("Access-Control-Allow-Origin") != "*" ||
		!strings.Contains(r.Header.Get("Access-Control-Allow-Methods"), "POST") ||
		r.Header.Get("Access-Control-Allow-Headers") != "content-type,x-access-token" {
		t.Fatalf("preflight = %d %v", r.Status, r.Header)
	}
	r = do(t, "GET", e.URL+"/health", map[string]string{"Origin": "https://example.com"}, nil)
	if r.Header.Get("Access-Control-Allow-Origin") != "*" || !strings.Contains(r.Header.Get("Access-Control-Expose-Headers"), "Grpc-Status") {
		t.Fatalf("CORS headers %v", r.Header)
	}
	r = do(t, "GET", e.URL+"/freeze", nil, nil)
	if r.Status != http.StatusNotFound {
		t.Fatalf("unknown path = %d", r.Status)
	}
	r.err(t)
}
