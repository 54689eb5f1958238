// Package interpreter_test exercises the code-interpreter API against real
// kernels (python3-ipykernel, bash) through raw HTTP requests.
package interpreter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/envd/interpreter"
	"github.com/moatsh/moat/internal/jupyter"
	"github.com/moatsh/moat/internal/testkit"
)

// requireKernel needs python3 with ipykernel (testkit.Missing: a skip, a
// failure under MOAT_TEST_REQUIRE=1).
func requireKernel(t testing.TB) {
	t.Helper()
	spec := jupyter.PythonSpec("")
	if err := spec.LookPath(); err != nil {
		testkit.Missing(t, "python not installed: %v", err)
	}
	if err := exec.Command(spec.Argv[0], "-c", "import ipykernel").Run(); err != nil {
		testkit.Missing(t, "ipykernel not importable by %s (apt-get install python3-ipykernel): %v", spec.Argv[0], err)
	}
}

// newServer starts a Service behind httptest.
func newServer(t testing.TB, cfg interpreter.Config) (*httptest.Server, *interpreter.Service) {
	t.Helper()
	requireKernel(t)
	if cfg.DefaultCwd == "" {
		cfg.DefaultCwd = t.TempDir()
	}
	if cfg.ConnDir == "" {
		cfg.ConnDir = t.TempDir()
	}
	svc := interpreter.NewService(cfg)
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(func() { srv.Close(); svc.Close() })
	return srv, svc
}

// line is one decoded NDJSON object.
type line map[string]any

func (l line) str(k string) string { s, _ := l[k].(string); return s }

// execution is the parsed /execute response.
type execution struct {
	status int
	raw    []byte
	lines  []line
}

func (e execution) ofType(typ string) []line {
	var out []line
	for _, l := range e.lines {
		if l["type"] == typ {
			out = append(out, l)
		}
	}
	return out
}

func (e execution) stdout() string {
	var b strings.Builder
	for _, l := range e.ofType("stdout") {
		b.WriteString(l.str("text"))
	}
	return b.String()
}

func (e execution) mainText() string {
	for _, l := range e.ofType("result") {
		if l["is_main_result"] == true {
			return l.str("text")
		}
	}
	return ""
}

func (e execution) firstError() line {
	if errs := e.ofType("error"); len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// post sends a raw JSON body.
func post(t testing.TB, ctx context.Context, url, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return http.DefaultClient.Do(req)
}

// execute posts /execute and validates the stream framing: every line is
// ASCII-only JSON, no blank lines, the last is end_of_execution.
func execute(t testing.TB, srv *httptest.Server, body map[string]any) execution {
	t.Helper()
	return executeCtx(t, context.Background(), srv, body, true)
}

func executeCtx(t testing.TB, ctx context.Context, srv *httptest.Server, body map[string]any, wantEnd bool) execution {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := post(t, ctx, srv.URL+"/execute", string(b))
	if err != nil {
		t.Fatalf("POST /execute: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	e := execution{status: resp.StatusCode, raw: raw}
	if resp.StatusCode != http.StatusOK {
		return e
	}
	for i, c := range raw {
		if c >= 0x80 {
			t.Fatalf("non-ASCII byte %#x at %d in stream", c, i)
		}
	}
	rawLines := bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n"))
	for _, rl := range rawLines {
		if len(rl) == 0 {
			t.Fatalf("blank line in stream: %q", raw)
		}
		var l line
		if err := json.Unmarshal(rl, &l); err != nil {
			t.Fatalf("invalid JSON line %q: %v", rl, err)
		}
		e.lines = append(e.lines, l)
	}
	if wantEnd {
		if last := rawLines[len(rawLines)-1]; string(last) != `{"type": "end_of_execution"}` {
			t.Fatalf("last line = %q, want end_of_execution", last)
		}
	}
	return e
}

// doJSON performs a request and decodes a JSON answer into out (if set).
func doJSON(t testing.TB, method, url string, body string, out any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, url, b, err)
		}
	}
	return resp.StatusCode
}
