package server_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/orchestrator/orchestratortest"
	"github.com/moatsh/moat/internal/secrets"
	"github.com/moatsh/moat/internal/server"
	"github.com/moatsh/moat/internal/store"
)

// newSecretsHarness is newHarness with the secrets API on and every log
// line, debug included, written to a file; logs closes the server (which
// waits for its handlers) and returns the file's content.
// testEgressCA stands for the egress CA's certificate (the fake envd
// does not parse it).
const testEgressCA = "-----BEGIN CERTIFICATE-----\ntest\n-----END CERTIFICATE-----\n"

func newSecretsHarness(t *testing.T) (h *harness, logs func() string) {
	t.Helper()
	env := orchestratortest.New(t, orchestrator.Config{MaxTimeout: time.Hour, EgressCA: []byte(testEgressCA)})
	key, err := env.DB.CreateAPIKey(context.Background(), store.DefaultTeam)
	if err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(t.TempDir(), "server.log")
	f, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	log := slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}))
	svc := secrets.NewService(env.DB, secrets.NewKeyring(filepath.Join(t.TempDir(), secrets.KeyFile)))
	ts := httptest.NewServer(server.New(server.Config{Store: env.DB, Orch: env.Orch, Logger: log, Secrets: svc}))
	t.Cleanup(ts.Close)
	return &harness{t: t, url: ts.URL, key: key, env: env}, func() string {
		ts.Close()
		b, err := os.ReadFile(logFile)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
}

// TestSecretValuesNeverLogged: with debug logging, neither accepted nor
// refused values reach the log or a response.
func TestSecretValuesNeverLogged(t *testing.T) {
	h, logs := newSecretsHarness(t)
	const v = "s3cr3t-VALUE-1234"
	var bodies []string
	for _, c := range []struct {
		method, path, body string
		status             int
	}{
		{"POST", "/secrets", `{"name":"k","value":"` + v + `"}`, 201},
		{"POST", "/secrets", `{"name":"k","value":"` + v + `"}`, 409},
		{"POST", "/secrets", `{"name":"bad name","value":"` + v + `"}`, 400},
		{"POST", "/secrets", `{"name":"k2","value":"` + v + `",}`, 400},
		{"POST", "/secrets", `{"name":"k3","value":"` + strings.Repeat(v, 5000) + `"}`, 400},
		{"POST", "/secrets/k", `{"value":"` + v + `"}`, 200},
		{"POST", "/secrets/nope", `{"value":"` + v + `"}`, 404},
		{"GET", "/secrets/k", "", 200},
		{"GET", "/secrets?limit=1", "", 200},
		{"DELETE", "/secrets/k", "", 204},
	} {
		r := h.do(c.method, c.path, c.body)
		if r.status != c.status {
			t.Fatalf("%s %s: %d %s, want %d", c.method, c.path, r.status, r.body, c.status)
		}
		bodies = append(bodies, string(r.body))
	}
	for _, b := range bodies {
		if strings.Contains(b, v) {
			t.Fatalf("a response carries the value: %s", b)
		}
	}
	if out := logs(); strings.Contains(out, v) || !strings.Contains(out, "/secrets") {
		t.Fatalf("log carries the value, or logged no request:\n%s", out)
	}
}

// TestRulesNeedExistingSecrets: a placeholder of a secret the team lacks
// is 400 naming it and creates nothing; with the secret, the rules are
// stored with the sandbox (GET reports them with their placeholders, never
// the value), reach the host's egress policy with the team, and envd is
// handed the egress CA; PUT replaces them, and one without rules clears them.
func TestRulesNeedExistingSecrets(t *testing.T) {
	h, logs := newSecretsHarness(t)
	const rules = `"rules":{"api.example.com":[{"transform":{"headers":{"Authorization":"Bearer ${e2b.secrets.Tok}"}}}]}`
	body := `{"templateID":"base","network":{"allowOut":["api.example.com"],"denyOut":["0.0.0.0/0"],` + rules + `}}`
	if msg := h.do("POST", "/v2/sandboxes", body).errBody(t, 400); !strings.Contains(msg, `secret "tok" not found`) {
		t.Fatalf("unknown secret: %q", msg)
	}
	if n := h.env.Runtime.Count(); n != 0 {
		t.Fatalf("%d sandboxes created by refused requests", n)
	}
	const value = "the-secret-value-9f2c"
	if r := h.do("POST", "/secrets", `{"name":"tok","value":"`+value+`"}`); r.status != 201 {
		t.Fatalf("create secret: %d %s", r.status, r.body)
	}
	r := h.do("POST", "/v2/sandboxes", body)
	if r.status != 201 {
		t.Fatalf("create with rules: %d %s", r.status, r.body)
	}
	var sb struct {
		SandboxID string `json:"sandboxID"`
	}
	r.json(t, &sb)
	get := h.do("GET", "/sandboxes/"+sb.SandboxID, "")
	if !strings.Contains(string(get.body), `"rules":{"api.example.com":[{"transform":{"headers":{"Authorization":"Bearer ${e2b.secrets.Tok}"}}}]}`) {
		t.Fatalf("GET does not report the rules: %s", get.body)
	}
	e, _ := h.env.Runtime.Egress(sb.SandboxID)
	if e.Team != store.DefaultTeam || len(e.Headers) != 1 || e.Headers[0].Domain != "api.example.com" {
		t.Fatalf("egress policy: %+v", e)
	}
	if in, _ := h.env.Runtime.Init(sb.SandboxID); in.EgressCA != testEgressCA {
		t.Fatalf("envd not given the egress CA: %+v", in)
	}
	p := "/sandboxes/" + sb.SandboxID + "/network"
	if r := h.do("PUT", p, `{"allowOut":["*.example.com"],"denyOut":["0.0.0.0/0"],"rules":{"*.example.com":[{"transform":{"headers":{"X-A":"a"}}}]}}`); r.status != 204 {
		t.Fatalf("PUT rules: %d %s", r.status, r.body)
	}
	if e, _ := h.env.Runtime.Egress(sb.SandboxID); len(e.Headers) != 1 || e.Headers[0].Domain != "*.example.com" {
		t.Fatalf("PUT did not replace the rules: %+v", e)
	}
	if r := h.do("PUT", p, `{"allowOut":["*.example.com"],"denyOut":["0.0.0.0/0"]}`); r.status != 204 {
		t.Fatalf("PUT without rules: %d %s", r.status, r.body)
	}
	if e, _ := h.env.Runtime.Egress(sb.SandboxID); len(e.Headers) != 0 {
		t.Fatalf("PUT without rules kept them: %+v", e)
	}
	if strings.Contains(string(get.body), value) || strings.Contains(logs(), value) {
		t.Fatal("the secret's value reached a response or the log")
	}
}

// TestSecretsOffAnswers501: a server without a secrets service says so.
func TestSecretsOffAnswers501(t *testing.T) {
	h := newHarness(t)
	for _, p := range [][2]string{{"GET", "/secrets"}, {"POST", "/secrets"}, {"GET", "/secrets/x"},
		{"POST", "/secrets/x"}, {"DELETE", "/secrets/x"}} {
		h.do(p[0], p[1], `{}`).errBody(t, 501)
	}
}
