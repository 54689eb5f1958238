package files

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/envd/users"
)

// filesEnv is a /files handler in host mode: "root" and "user" are the
// account the test runs as, with home home.
type filesEnv struct {
	h    *Handler
	st   *state.State
	home string
}

func newFilesEnv(t *testing.T, chown ChownFunc) *filesEnv {
	t.Helper()
	home := t.TempDir()
	st := state.New(nil)
	h := New(Config{State: st, Users: users.NewHostResolver(home), Logger: slog.New(slog.DiscardHandler), Chown: chown})
	return &filesEnv{h: h, st: st, home: home}
}

// post sends body to POST /files/compose and returns the status and body.
func (e *filesEnv) post(t *testing.T, body string, hdr map[string]string) (int, []byte) {
	t.Helper()
	r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/files/compose", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	e.h.Compose(w, r)
	return w.Code, w.Body.Bytes()
}

// write creates the file rel (relative to home) with data and returns its
// absolute path.
func (e *filesEnv) write(t *testing.T, rel, data string) string {
	t.Helper()
	p := filepath.Join(e.home, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func composeBody(t *testing.T, sources []string, dest string, username *string) string {
	t.Helper()
	m := map[string]any{"source_paths": sources, "destination": dest}
	if username != nil {
		m["username"] = *username
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func decodeEntry(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("answer %q: %v", body, err)
	}
	return got
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// TestComposeConcatenates covers E2B's successful composes
// (compose_test.go): order kept, sources removed, parents created,
// relative and ~ paths resolved against the user's home, an existing
// destination replaced, a source listed twice copied twice.
func TestComposeConcatenates(t *testing.T) {
	str := func(s string) *string { return &s }
	tests := []struct {
		name     string
		parts    []string // contents of p0, p1, ...
		sources  func(e *filesEnv) []string
		dest     string // relative to home unless absolute
		username *string
		want     string
	}{
		{"three parts in order", []string{"Hello, ", "World", "!"}, nil, "composed.txt", nil, "Hello, World!"},
		{"single part", []string{"solo"}, nil, "single.txt", str("user"), "solo"},
		{"nested destination", []string{"content"}, nil, "nested/dir/file.txt", str("root"), "content"},
		{"tilde paths", []string{"a", "b"}, func(*filesEnv) []string { return []string{"~/p0", "~/p1"} }, "~/t.txt", nil, "ab"},
		{"relative sources", []string{"x", "y"}, func(*filesEnv) []string { return []string{"p1", "./p0"} }, "r.txt", nil, "yx"},
		{"duplicate source", []string{"dup"}, func(*filesEnv) []string { return []string{"p0", "p0"} }, "d.txt", nil, "dupdup"},
		{"empty parts", []string{"", "z", ""}, nil, "e.txt", nil, "z"},
		{"symlinked source", []string{"target"}, func(e *filesEnv) []string {
			mustLink(e.home+"/p0", e.home+"/link")
			return []string{"link"}
		}, "s.txt", nil, "target"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newFilesEnv(t, nil)
			var abs []string
			for i, data := range tt.parts {
				abs = append(abs, e.write(t, "p"+strconv.Itoa(i), data))
			}
			srcs := abs
			if tt.sources != nil {
				srcs = tt.sources(e)
			}
			code, body := e.post(t, composeBody(t, srcs, tt.dest, tt.username), nil)
			if code != http.StatusOK {
				t.Fatalf("status %d: %s", code, body)
			}
			dest := tt.dest
			if rest, ok := strings.CutPrefix(dest, "~/"); ok {
				dest = rest
			}
			if !filepath.IsAbs(dest) {
				dest = filepath.Join(e.home, dest)
			}
			got := decodeEntry(t, body)
			if len(got) != 3 || got["path"] != dest || got["name"] != filepath.Base(dest) || got["type"] != "file" {
				t.Fatalf("answer = %v, want path %s", got, dest)
			}
			data, err := os.ReadFile(dest)
			if err != nil || string(data) != tt.want {
				t.Fatalf("destination = %q, %v; want %q", data, err, tt.want)
			}
			for _, src := range srcs {
				p := strings.TrimPrefix(src, "~/")
				if !filepath.IsAbs(p) {
					p = filepath.Join(e.home, p)
				}
				if exists(p) {
					t.Errorf("source %s was not removed", src)
				}
			}
			if tt.name == "symlinked source" && !exists(abs[0]) {
				t.Error("the target of a symlinked source was removed")
			}
			assertNoTemp(t, filepath.Dir(dest))
		})
	}
}

func mustLink(target, link string) {
	if err := os.Symlink(target, link); err != nil {
		panic(err)
	}
}

func assertNoTemp(t *testing.T, dir string) {
	t.Helper()
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		if strings.Contains(de.Name(), ".e2b-compose.") {
			t.Errorf("temporary file %s left behind", de.Name())
		}
	}
}

// TestComposeReplacesDestination checks that an existing destination is
// replaced whole: new content, and none of its old metadata (a new inode).
func TestComposeReplacesDestination(t *testing.T) {
	e := newFilesEnv(t, nil)
	dest := e.write(t, "out.txt", "old content that is longer")
	xattrs := unix.Setxattr(dest, "user.e2b.owner", []byte("old"), 0) == nil
	src := e.write(t, "p0", "new")
	code, body := e.post(t, composeBody(t, []string{src}, dest, nil), nil)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	if data, _ := os.ReadFile(dest); string(data) != "new" {
		t.Fatalf("destination = %q", data)
	}
	if _, err := unix.Getxattr(dest, "user.e2b.owner", make([]byte, 16)); xattrs && err == nil {
		t.Fatal("the old destination's metadata survived")
	}
}

// TestComposeManyParts has no part limit, as E2B has none.
func TestComposeManyParts(t *testing.T) {
	e := newFilesEnv(t, nil)
	var srcs []string
	var want strings.Builder
	for i := range 1000 {
		s := fmt.Sprintf("%04d;", i)
		srcs = append(srcs, e.write(t, "parts/"+strconv.Itoa(i), s))
		want.WriteString(s)
	}
	code, body := e.post(t, composeBody(t, srcs, "big.txt", nil), nil)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	if data, _ := os.ReadFile(filepath.Join(e.home, "big.txt")); string(data) != want.String() {
		t.Fatalf("destination has %d bytes, want %d", len(data), want.Len())
	}
}

// TestComposeLargeParts checks the kernel-side copy on multi-MiB parts.
func TestComposeLargeParts(t *testing.T) {
	e := newFilesEnv(t, nil)
	const partSize = 3<<20 + 17
	var srcs []string
	for i := range 4 {
		srcs = append(srcs, e.write(t, "p"+strconv.Itoa(i), string(bytes.Repeat([]byte{byte('a' + i)}, partSize))))
	}
	code, body := e.post(t, composeBody(t, srcs, "large.bin", nil), nil)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	data, err := os.ReadFile(filepath.Join(e.home, "large.bin"))
	if err != nil || len(data) != 4*partSize {
		t.Fatalf("destination: %d bytes, %v", len(data), err)
	}
	for i := range 4 {
		if data[i*partSize] != byte('a'+i) || data[(i+1)*partSize-1] != byte('a'+i) {
			t.Fatalf("part %d misplaced", i)
		}
	}
}
