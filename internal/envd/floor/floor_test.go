package floor

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	root := t.TempDir()
	h := Handler(root)
	for _, tc := range []struct {
		method, path, body string
		code               int
		want               string
	}{
		{"PUT", "/a.txt", "hello", 204, ""},
		{"GET", "/a.txt", "", 200, "hello"},
		{"GET", "/missing", "", 404, ""},
		{"PUT", "/../../escape.txt", "x", 204, ""}, // cleaned: stays under root
		{"DELETE", "/a.txt", "", 405, ""},
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)))
		if w.Code != tc.code || (tc.want != "" && w.Body.String() != tc.want) {
			t.Errorf("%s %s: %d %q, want %d %q", tc.method, tc.path, w.Code, w.Body.String(), tc.code, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "escape.txt")); err != nil {
		t.Errorf("the cleaned path: %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(filepath.Dir(root)), "escape.txt")); err == nil {
		t.Error("written outside the root")
	}
	_ = http.StatusOK
}
