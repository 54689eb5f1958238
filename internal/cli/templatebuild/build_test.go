package templatebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeBuildAPI is the server side of a template build as the CLI uses it.
type fakeBuildAPI struct {
	mu       sync.Mutex
	start    buildStart
	uploads  map[string][]string // hash → tar entry names
	statuses []buildStatus       // answered in order, the last one repeatedly
	polls    int
	offsets  []string
	known    map[string]bool // templates GET /templates/aliases knows
}

func (f *fakeBuildAPI) handler(t *testing.T) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /templates/aliases/{alias}", func(w http.ResponseWriter, r *http.Request) {
		if !f.known[r.PathValue("alias")] {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"code":404,"message":"not found"}`)
			return
		}
		fmt.Fprint(w, `{"templateID":"x","public":true}`)
	})
	mux.HandleFunc("POST /v3/templates", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-Key") != "k" {
			t.Errorf("api key %q", r.Header.Get("X-API-Key"))
		}
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprint(w, `{"templateID":"tid","buildID":"bid"}`)
	})
	mux.HandleFunc("GET /templates/tid", func(w http.ResponseWriter, r *http.Request) {
		// The last build took 90 s; the current one (bid) is not finished.
		fmt.Fprint(w, `{"templateID":"tid","builds":[{"buildID":"old","status":"ready","createdAt":"2026-12-01T10:00:00Z","finishedAt":"2026-12-01T10:01:30Z"},`+
			`{"buildID":"older","status":"ready","createdAt":"2026-11-01T10:00:00Z","finishedAt":"2026-11-01T10:09:00Z"},`+
			`{"buildID":"bid","status":"building","createdAt":"2026-12-07T10:00:00Z"}]}`)
	})
	mux.HandleFunc("GET /templates/tid/files/{hash}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"present":false,"url":"http://%s/up/%s"}`, r.Host, r.PathValue("hash"))
	})
	mux.HandleFunc("PUT /up/{hash}", func(w http.ResponseWriter, r *http.Request) {
		names, err := tarNames(r.Body)
		if err != nil {
			t.Errorf("upload: %v", err)
		}
		f.mu.Lock()
		f.uploads[r.PathValue("hash")] = names
		f.mu.Unlock()
	})
	mux.HandleFunc("POST /v2/templates/tid/builds/bid", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := json.NewDecoder(r.Body).Decode(&f.start); err != nil {
			t.Errorf("build body: %v", err)
		}
		w.WriteHeader(http.StatusAccepted)
	})
	mux.HandleFunc("GET /templates/tid/builds/bid/status", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.offsets = append(f.offsets, r.URL.Query().Get("logsOffset"))
		st := f.statuses[min(f.polls, len(f.statuses)-1)]
		f.polls++
		_ = json.NewEncoder(w).Encode(st)
	})
	return mux
}

func tarNames(r io.Reader) ([]string, error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(gz)
	var out []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			sort.Strings(out)
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, h.Name)
	}
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func newTestBuild(t *testing.T, f *fakeBuildAPI, dockerfile string) (*dockerfileBuild, *bytes.Buffer) {
	t.Helper()
	srv := httptest.NewServer(f.handler(t))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"Dockerfile": dockerfile, "app/main.py": "print(1)\n", "app/lib/x.py": "", "req.txt": "flask\n"})
	var out bytes.Buffer
	return &dockerfileBuild{api: &templateAPI{url: srv.URL, key: "k", http: srv.Client()}, path: filepath.Join(dir, "Dockerfile"),
		contextDir: dir, name: "app", out: &out, poll: time.Millisecond}, &out
}

func TestDockerfileBuild(t *testing.T) {
	f := &fakeBuildAPI{uploads: map[string][]string{}, known: map[string]bool{"base": true}, statuses: []buildStatus{
		{Status: "building", LogEntries: []logEntry{{Level: "info", Message: "[1/6] USER root", Step: "1"}}},
		{Status: "building", LogEntries: []logEntry{{Level: "info", Message: "COPY app /srv/ (as root)", Step: "3"},
			{Level: "info", Message: "copied", Step: "3"}}},
		{Status: "ready", LogEntries: []logEntry{{Level: "info", Message: "build finished in 1s"}}},
		{Status: "ready"},
	}}
	b, out := newTestBuild(t, f, "FROM base\nCOPY app /srv/\nRUN pip install \\\n  -r /srv/req.txt\nCMD [\"python3\", \"/srv/main.py\"]\n")
	if err := b.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := f.start
	if st.FromTemplate != "base" || st.FromImage != "" || st.StartCmd != "python3 /srv/main.py" {
		t.Errorf("build body %+v", st)
	}
	var types []string
	for _, s := range st.Steps {
		types = append(types, s.Type+" "+strings.Join(s.Args, "|"))
	}
	want := []string{"USER root", "WORKDIR /", "COPY app|/srv/||", "RUN pip install   -r /srv/req.txt", "USER user", "WORKDIR /home/user"}
	if strings.Join(types, "\n") != strings.Join(want, "\n") {
		t.Errorf("steps\n%s\nwant\n%s", strings.Join(types, "\n"), strings.Join(want, "\n"))
	}
	h := st.Steps[2].FilesHash
	if len(h) != 64 {
		t.Fatalf("filesHash %q", h)
	}
	if got := strings.Join(f.uploads[h], " "); got != "app/ app/lib/ app/lib/x.py app/main.py" {
		t.Errorf("uploaded %q", got)
	}
	if strings.Join(f.offsets, ",") != "0,1,3,4" {
		t.Errorf("logsOffsets %v", f.offsets)
	}
	// The progress names each step and, going by the newest earlier build
	// (90 s), how long is left.
	if !strings.Contains(out.String(), "==> step 3/6 (Dockerfile line 2: COPY app /srv/") || !strings.Contains(out.String(), "(about 1m30s left, going by the last build)") {
		t.Errorf("progress output:\n%s", out)
	}
}

func TestDockerfileBuildFailureNamesStep(t *testing.T) {
	f := &fakeBuildAPI{uploads: map[string][]string{}, statuses: []buildStatus{
		{Status: "error", Reason: &struct {
			Message string `json:"message"`
			Step    string `json:"step"`
		}{Message: "exit status 127", Step: "4"}},
	}}
	b, _ := newTestBuild(t, f, "FROM debian:12\nENV A=1\nRUN nosuchcmd\n")
	err := b.run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "step 4/6 (Dockerfile line 3: RUN nosuchcmd)") ||
		!strings.Contains(err.Error(), "exit status 127") {
		t.Fatalf("err = %v", err)
	}
	if f.start.FromImage != "debian:12" {
		t.Errorf("fromImage %q", f.start.FromImage)
	}
}

func TestDockerfileBuildRefusesBeforeSending(t *testing.T) {
	for name, df := range map[string]string{
		"syntax":      "FROM a\nCOPY\n",
		"url":         "FROM a\nADD http://x/y.tgz /z\n",
		"missing src": "FROM a\nCOPY nothere /x\n",
	} {
		t.Run(name, func(t *testing.T) {
			f := &fakeBuildAPI{uploads: map[string][]string{}}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				t.Errorf("request sent: %s %s", r.Method, r.URL)
			}))
			defer srv.Close()
			b, _ := newTestBuild(t, f, df)
			b.api.url = srv.URL
			if err := b.run(context.Background()); err == nil || !strings.Contains(err.Error(), "line 2") {
				t.Fatalf("err = %v, want one naming line 2", err)
			}
		})
	}
}

func TestFilesHashStable(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a/x": "1", "a/y": "2"})
	h1, err := collectFiles(dir, "a", "/d", nil)
	if err != nil {
		t.Fatal(err)
	}
	h2, _ := collectFiles(dir, "a", "/d", nil)
	h3, _ := collectFiles(dir, "a", "/e", nil)
	writeFiles(t, dir, map[string]string{"a/y": "3"})
	h4, _ := collectFiles(dir, "a", "/d", nil)
	if h1.hash != h2.hash || h1.hash == h3.hash || h1.hash == h4.hash {
		t.Errorf("hashes %s %s %s %s", h1.hash, h2.hash, h3.hash, h4.hash)
	}
	if _, err := collectFiles(dir, "*.none", "/d", nil); err == nil {
		t.Error("no error for a source without files")
	}
}

func TestDockerignore(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{".dockerignore": "**/node_modules\n**/*.log\n!**/keep.log\n",
		"app/a.js": "", "app/node_modules/x/y.js": "", "app/debug.log": "", "app/keep.log": ""})
	ign, err := readDockerignore(dir)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := collectFiles(dir, "app", "/app", ign)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cf.rel, " "); got != "app app/a.js app/keep.log" {
		t.Errorf("files %q", got)
	}
}

// TestETA: a build past the last one's length says so; without one there
// is no estimate.
func TestETA(t *testing.T) {
	p := &buildProgress{start: time.Now().Add(-2 * time.Minute), expect: time.Minute}
	if got := p.eta(); got != " (longer than the last build's 1m0s)" {
		t.Errorf("past: %q", got)
	}
	p.expect = 0
	if got := p.eta(); got != "" {
		t.Errorf("none: %q", got)
	}
}
