package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// fakeLifecycle is a REST API with pause, connect and snapshots. Sandbox
// "c1" lives on a runtime without snapshots (501).
type fakeLifecycle struct {
	mu       sync.Mutex
	states   map[string]string // sandbox ID -> "running" | "paused"
	snaps    []string          // snapshot IDs
	created  map[string]any    // last create body
	timeouts []float64         // connect timeouts received
	pauses   []string          // pause bodies received
}

func writeAPIError(w http.ResponseWriter, status int, msg string) {
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"code": status, "message": msg})
}

func (f *fakeLifecycle) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sandboxes", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		json.NewDecoder(r.Body).Decode(&f.created)
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]any{"sandboxID": "i9", "envdAccessToken": "tok"})
	})
	mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		id := r.PathValue("id")
		b, _ := io.ReadAll(r.Body)
		f.pauses = append(f.pauses, string(b))
		switch f.states[id] {
		case "":
			writeAPIError(w, http.StatusNotFound, "sandbox "+id+" not found")
		case "paused":
			writeAPIError(w, http.StatusConflict, "sandbox "+id+" is already paused")
		default:
			f.states[id] = "paused"
			w.WriteHeader(http.StatusNoContent)
		}
	})
	mux.HandleFunc("POST /v2/sandboxes/{id}/connect", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		id := r.PathValue("id")
		var body struct{ Timeout float64 }
		json.NewDecoder(r.Body).Decode(&body)
		f.timeouts = append(f.timeouts, body.Timeout)
		status := http.StatusOK
		switch f.states[id] {
		case "":
			writeAPIError(w, http.StatusNotFound, "sandbox "+id+" not found")
			return
		case "paused":
			f.states[id], status = "running", http.StatusCreated
		}
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]any{"sandboxID": id, "templateID": "base", "envdAccessToken": "tok"})
	})
	mux.HandleFunc("POST /sandboxes/{id}/snapshots", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		id := r.PathValue("id")
		if id == "c1" {
			writeAPIError(w, http.StatusNotImplemented, "the container runtime cannot snapshot sandboxes")
			return
		}
		var body struct{ Name string }
		json.NewDecoder(r.Body).Decode(&body)
		snap := fmt.Sprintf("snap%d", len(f.snaps)+1)
		f.snaps = append(f.snaps, snap)
		names := []string{}
		if body.Name != "" {
			names = append(names, body.Name)
		}
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]any{"snapshotID": snap, "names": names, "sandboxID": id,
			"createdAt": "2026-03-04T05:06:07Z"})
	})
	mux.HandleFunc("GET /snapshots", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		out := []map[string]any{}
		if sb := r.URL.Query().Get("sandboxID"); sb == "" || sb == "i1" {
			for _, s := range f.snaps {
				out = append(out, map[string]any{"snapshotID": s, "names": []string{"v1"}, "sandboxID": "i1"})
			}
		}
		json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("DELETE /templates/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		id := r.PathValue("id")
		for i, s := range f.snaps {
			if s == id {
				f.snaps = append(f.snaps[:i], f.snaps[i+1:]...)
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		writeAPIError(w, http.StatusNotFound, "template or snapshot '"+id+"' not found")
	})
	return mux
}

// TestLifecycleCommands runs the steps in order against one fake server.
func TestLifecycleCommands(t *testing.T) {
	f := &fakeLifecycle{states: map[string]string{"i1": "running", "c1": "running", "i2": "running"}}
	srv := httptest.NewServer(f.handler())
	defer srv.Close()
	t.Setenv("MOAT_API_URL", srv.URL)
	t.Setenv("MOAT_API_KEY", "e2b_test")

	tests := []struct {
		name       string
		args       []string
		wantOut    string // substring of stdout
		wantStderr string // substring of stderr
		wantCode   int    // exitError status
		wantErr    string // substring of a plain error
	}{
		{"create auto-pause", []string{"sandbox", "create", "--auto-pause", "--auto-resume", "-t", "snap-name"}, "i9\n", "", 0, ""},
		{"create auto-resume alone", []string{"sandbox", "create", "--auto-resume"}, "", "", 0, "requires AutoPause"},
		{"pause", []string{"sandbox", "pause", "i1"}, "", "", 0, ""},
		{"pause again", []string{"sandbox", "pause", "i1", "nope"}, "", "already paused", 1, ""},
		{"pause files only", []string{"sandbox", "pause", "--files-only", "i2"}, "", "", 0, ""},
		{"create files only with auto-resume", []string{"sandbox", "create", "--auto-pause", "--files-only", "--auto-resume"}, "", "", 0, "excludes AutoResume"},
		{"resume", []string{"sandbox", "resume", "i1", "--timeout", "60"}, "i1 resumed\n", "", 0, ""},
		{"resume running", []string{"sandbox", "resume", "i1"}, "i1 already running\n", "", 0, ""},
		{"resume unknown", []string{"sandbox", "resume", "i1", "nope"}, "i1 already running\n", "sandbox nope not found", 1, ""},
		{"snapshot", []string{"sandbox", "snapshot", "i1", "--name", "v1"}, "snap1\n", "", 0, ""},
		{"snapshot container", []string{"sandbox", "snapshot", "c1"}, "", "", 0, "cannot snapshot"},
		{"snapshot needs ID", []string{"sandbox", "snapshot"}, "", "", 0, "accepts 1 arg"},
		{"snapshots", []string{"sandbox", "snapshots", "--sandbox", "i1"}, "snap1  v1    i1", "", 0, ""},
		{"snapshot-rm", []string{"sandbox", "snapshot-rm", "snap1"}, "", "", 0, ""},
		{"snapshot-rm unknown", []string{"sandbox", "snapshot-rm", "snap1"}, "", "not found", 1, ""},
		{"snapshots empty", []string{"sandbox", "snapshots"}, "ID  NAME  SANDBOX  CREATED\n", "", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code, err := runCLI(tt.args...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || code != tt.wantCode || !strings.Contains(out, tt.wantOut) ||
				!strings.Contains(errOut, tt.wantStderr) {
				t.Fatalf("err=%v code=%d out=%q stderr=%q", err, code, out, errOut)
			}
		})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.created["autoPause"] != true || f.created["templateID"] != "snap-name" {
		t.Errorf("create body = %v", f.created)
	}
	if ar, _ := f.created["autoResume"].(map[string]any); ar["enabled"] != true {
		t.Errorf("create body = %v, want autoResume.enabled", f.created)
	}
	if want := []string{"", "", "", `{"memory":false}`}; fmt.Sprintf("%q", f.pauses) != fmt.Sprintf("%q", want) {
		t.Errorf("pause bodies = %q, want %q", f.pauses, want)
	}
	if want := []float64{60, 300, 300, 300}; fmt.Sprint(f.timeouts) != fmt.Sprint(want) {
		t.Errorf("connect timeouts = %v, want %v", f.timeouts, want)
	}
}
