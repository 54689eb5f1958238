package console

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

func get(t *testing.T, h http.Handler, method, path string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, "http://moat.test/", nil)
	req.URL.Path = path // unclean paths as a client could send them
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

// The embedded bundle is served without an API key, with its content types.
func TestServesBundle(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "api key required", http.StatusUnauthorized)
	})
	h := Mount(api)
	for path, want := range map[string]string{
		"/console/":            "text/html; charset=utf-8",
		"/console/index.html":  "text/html; charset=utf-8",
		"/console/console.js":  "text/javascript; charset=utf-8",
		"/console/console.css": "text/css; charset=utf-8",
		"/console/xterm.css":   "text/css; charset=utf-8",
	} {
		res := get(t, h, http.MethodGet, path)
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != want || len(body) == 0 {
			t.Errorf("GET %s: %d %q %d bytes, want 200 %q", path, res.StatusCode, res.Header.Get("Content-Type"), len(body), want)
		}
		if res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no nosniff", path)
		}
	}
	res := get(t, h, http.MethodGet, "/console/")
	body, _ := io.ReadAll(res.Body)
	if !strings.Contains(string(body), `src="console.js"`) {
		t.Errorf("index.html does not load console.js:\n%s", body)
	}
	if res := get(t, h, http.MethodGet, "/console"); res.StatusCode != http.StatusMovedPermanently || res.Header.Get("Location") != "/console/" {
		t.Errorf("GET /console: %d %q, want a redirect to /console/", res.StatusCode, res.Header.Get("Location"))
	}
	// Everything else is the API's.
	for _, path := range []string{"/sandboxes", "/consoles", "/console.js"} {
		if res := get(t, h, http.MethodGet, path); res.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s: %d, want the API's 401", path, res.StatusCode)
		}
	}
}

func TestNotFoundAndMethods(t *testing.T) {
	h := Handler(nil)
	for _, path := range []string{"/console/nope.js", "/console/dist/index.html", "/console/web/main.js"} {
		if res := get(t, h, http.MethodGet, path); res.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, res.StatusCode)
		}
	}
	if res := get(t, h, http.MethodPost, "/console/"); res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /console/: %d, want 405", res.StatusCode)
	}
	res := get(t, h, http.MethodHead, "/console/console.js")
	if body, _ := io.ReadAll(res.Body); res.StatusCode != http.StatusOK || len(body) != 0 {
		t.Errorf("HEAD: %d with %d bytes, want 200 and no body", res.StatusCode, len(body))
	}
}

// No name reaches outside the FS it serves: the secret beside "site"
// stays unreachable however the path is spelled.
func TestCannotEscape(t *testing.T) {
	fsys := fstest.MapFS{
		"site/index.html": {Data: []byte("ok")},
		"secret.txt":      {Data: []byte("secret")},
	}
	sub, err := fsys.Sub("site")
	if err != nil {
		t.Fatal(err)
	}
	h := Handler(sub)
	if res := get(t, h, http.MethodGet, "/console/index.html"); res.StatusCode != http.StatusOK {
		t.Fatalf("index: %d", res.StatusCode)
	}
	for _, path := range []string{
		"/console/../secret.txt", "/console/..%2fsecret.txt", "/console/./../secret.txt",
		"/console//secret.txt", "/console/..\\secret.txt", "/console/%2e%2e/secret.txt",
		"/console/../../etc/passwd", "/console//etc/passwd",
	} {
		res := get(t, h, http.MethodGet, path)
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusNotFound || strings.Contains(string(body), "secret") {
			t.Errorf("GET %q: %d %q, want 404", path, res.StatusCode, body)
		}
	}
}

// The files the build copies verbatim into dist/ match their sources (the
// bundle itself is checked by rebuilding: see docs/console.md).
func TestDistCopies(t *testing.T) {
	for _, name := range []string{"index.html", "console.css"} {
		src, err := os.ReadFile(filepath.Join("web", name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := dist.ReadFile("dist/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if string(src) != string(got) {
			t.Errorf("dist/%s differs from web/%s: run `cd internal/console && npm ci && npm run build`", name, name)
		}
	}
}
