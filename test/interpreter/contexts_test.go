package interpreter_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/envd/interpreter"
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

// TestLatency logs first-execution latency with a cold and a warm kernel.
func TestLatency(t *testing.T) {
	cold, _ := newServer(t, interpreter.Config{})
	start := time.Now()
	if e := execute(t, cold, map[string]any{"code": "1"}); e.mainText() != "1" {
		t.Fatalf("cold: %s", e.raw)
	}
	t.Logf("first execution, cold kernel: %v", time.Since(start))

	warm, _ := newServer(t, interpreter.Config{WarmPython: true})
	deadline := time.Now().Add(60 * time.Second)
	for {
		var list []codeContext
		doJSON(t, http.MethodGet, warm.URL+"/contexts", "", &list)
		if len(list) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("warm python context never appeared")
		}
		time.Sleep(50 * time.Millisecond)
	}
	start = time.Now()
	if e := execute(t, warm, map[string]any{"code": "1"}); e.mainText() != "1" {
		t.Fatalf("warm: %s", e.raw)
	}
	t.Logf("first execution, warm kernel: %v", time.Since(start))
}
