package interpreter_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/envd/interpreter"
	"github.com/moatsh/moat/internal/testkit"
)

type codeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func TestBadRequests(t *testing.T) {
	srv, _ := newServer(t, interpreter.Config{})
	tests := []struct {
		name, path, body string
		status           int
		msg              string
	}{
		{"malformed json", "/execute", `{"code": `, http.StatusBadRequest, "invalid JSON"},
		{"missing code", "/execute", `{"language": "python"}`, http.StatusBadRequest, "code"},
		{"both context and language", "/execute", `{"code": "1", "context_id": "abc", "language": "python"}`, http.StatusBadRequest, "Only one of context_id or language can be provided"},
		{"unknown language", "/execute", `{"code": "1", "language": "cobol"}`, http.StatusBadRequest, "Unsupported language"},
		{"unknown context", "/execute", `{"code": "1", "context_id": "nope"}`, http.StatusNotFound, "Context nope not found"},
		{"bad env name", "/execute", `{"code": "1", "env_vars": {"A B": "x"}}`, http.StatusBadRequest, "environment variable"},
		{"context unknown language", "/contexts", `{"language": "cobol"}`, http.StatusBadRequest, "Unsupported language"},
		{"context malformed", "/contexts", `[`, http.StatusBadRequest, "invalid JSON"},
		{"restart unknown", "/contexts/nope/restart", ``, http.StatusNotFound, "Context nope not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := post(t, context.Background(), srv.URL+tt.path, tt.body)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var b bytes.Buffer
			_, _ = b.ReadFrom(resp.Body)
			if resp.StatusCode != tt.status || !strings.Contains(b.String(), tt.msg) {
				t.Fatalf("got %d %q, want %d containing %q", resp.StatusCode, b.String(), tt.status, tt.msg)
			}
		})
	}
	if code := doJSON(t, http.MethodDelete, srv.URL+"/contexts/nope", "", nil); code != http.StatusNotFound {
		t.Errorf("DELETE unknown = %d", code)
	}
	var health string
	if code := doJSON(t, http.MethodGet, srv.URL+"/health", "", &health); code != http.StatusOK || health != "OK" {
		t.Errorf("health = %d %q", code, health)
	}
}

func TestContexts(t *testing.T) {
	srv, _ := newServer(t, interpreter.Config{})
	cwd := t.TempDir()
	var a, b codeContext
	if code := doJSON(t, http.MethodPost, srv.URL+"/contexts", `{"language": "Python", "cwd": "`+cwd+`"}`, &a); code != http.StatusOK {
		t.Fatalf("create a: %d", code)
	}
	if code := doJSON(t, http.MethodPost, srv.URL+"/contexts", `{}`, &b); code != http.StatusOK {
		t.Fatalf("create b: %d", code)
	}
	if a.ID == "" || a.Language != "python" || a.Cwd != cwd || b.Language != "python" || a.ID == b.ID {
		t.Fatalf("contexts a=%+v b=%+v", a, b)
	}
	execute(t, srv, map[string]any{"code": "v = 'a'", "context_id": a.ID})
	if e := execute(t, srv, map[string]any{"code": "import os; (v, os.getcwd())", "context_id": a.ID}); e.mainText() != "('a', '"+cwd+"')" {
		t.Errorf("context a: %s", e.raw)
	}
	if e := execute(t, srv, map[string]any{"code": "v", "context_id": b.ID}); e.firstError().str("name") != "NameError" {
		t.Errorf("context b sees a's state: %s", e.raw)
	}

	var list []codeContext
	doJSON(t, http.MethodGet, srv.URL+"/contexts", "", &list)
	if len(list) != 2 || list[0].ID != a.ID || list[1].ID != b.ID {
		t.Errorf("list = %+v", list)
	}

	start := time.Now()
	if code := doJSON(t, http.MethodPost, srv.URL+"/contexts/"+a.ID+"/restart", "", nil); code != http.StatusOK {
		t.Fatalf("restart = %d", code)
	}
	t.Logf("context restart: %v", time.Since(start))
	if e := execute(t, srv, map[string]any{"code": "v", "context_id": a.ID}); e.firstError().str("name") != "NameError" {
		t.Errorf("state survived restart: %s", e.raw)
	}

	if code := doJSON(t, http.MethodDelete, srv.URL+"/contexts/"+a.ID, "", nil); code != http.StatusOK {
		t.Fatalf("delete = %d", code)
	}
	if e := execute(t, srv, map[string]any{"code": "1", "context_id": a.ID}); e.status != http.StatusNotFound {
		t.Errorf("execute on deleted context = %d", e.status)
	}
	list = nil
	doJSON(t, http.MethodGet, srv.URL+"/contexts", "", &list)
	if len(list) != 1 || list[0].ID != b.ID {
		t.Errorf("list after delete = %+v", list)
	}
}

// TestWarmPythonContext: with WarmPython the service starts the default
// python context by itself, and the first execution runs on it.
func TestWarmPythonContext(t *testing.T) {
	warm, _ := newServer(t, interpreter.Config{WarmPython: true})
	waitWarmContext(t, warm)
	if e := execute(t, warm, map[string]any{"code": "1"}); e.mainText() != "1" {
		t.Fatalf("warm: %s", e.raw)
	}
}

// waitWarmContext waits until srv lists its warm python context.
func waitWarmContext(t testing.TB, srv *httptest.Server) {
	t.Helper()
	testkit.WaitFor(t, 60*time.Second, "the warm python context", func() bool {
		var list []codeContext
		doJSON(t, http.MethodGet, srv.URL+"/contexts", "", &list)
		return len(list) == 1
	})
}

// BenchmarkLatency times the first execution with a cold kernel (the
// baseline: the context starts on the request) and with a warm one
// (WarmPython started it before), a new service each round (one round a
// second of -benchtime; -benchtime=5x runs five), and prints both medians
// and their ratio.
func BenchmarkLatency(b *testing.B) {
	var cold, warm []time.Duration
	for b.Loop() {
		cs, _ := newServer(b, interpreter.Config{})
		start := time.Now()
		if e := execute(b, cs, map[string]any{"code": "1"}); e.mainText() != "1" {
			b.Fatalf("cold: %s", e.raw)
		}
		cold = append(cold, time.Since(start))

		ws, _ := newServer(b, interpreter.Config{WarmPython: true})
		waitWarmContext(b, ws)
		start = time.Now()
		if e := execute(b, ws, map[string]any{"code": "1"}); e.mainText() != "1" {
			b.Fatalf("warm: %s", e.raw)
		}
		warm = append(warm, time.Since(start))
	}
	mc, mw := median(cold), median(warm)
	fmt.Printf("first execution (%d rounds, medians): cold kernel %v, warm kernel %v, cold/warm %.1f\n",
		len(cold), mc.Round(time.Millisecond), mw.Round(time.Millisecond), float64(mc)/float64(max(mw, 1)))
	b.ReportMetric(float64(mc.Microseconds())/1000, "cold-median-ms")
	b.ReportMetric(float64(mw.Microseconds())/1000, "warm-median-ms")
	b.ReportMetric(float64(mc)/float64(max(mw, 1)), "cold/warm")
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
