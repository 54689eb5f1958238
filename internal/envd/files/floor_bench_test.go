package files

import (
	"bytes"
	"crypto/rand"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/moatsh/moat/internal/envd/floor"
)

// BenchmarkFloor1K: a 1 KiB download and a 1 KiB multipart upload through
// /files' handler next to the same through the bare file server `moat
// bench --files` measures envd against (package envd/floor), in process,
// without the network. Pooled compressors and buffers took the download
// from 674 µs to ~40 µs (the floor: ~30 µs) and the upload from 914 µs to
// ~460 µs (the floor: ~390 µs, most of it the file's open and close).
func BenchmarkFloor1K(b *testing.B) {
	e := newFilesEnv(&testing.T{}, nil)
	data := make([]byte, 1024)
	_, _ = rand.Read(data)
	p := filepath.Join(e.home, "x")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		b.Fatal(err)
	}
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	part, _ := mw.CreateFormFile("file", "up")
	_, _ = part.Write(data)
	_ = mw.Close()
	fl := floor.Handler("/")
	for _, c := range []struct {
		name string
		req  func() *http.Request
		h    http.Handler
	}{
		{"download/envd", func() *http.Request {
			r := httptest.NewRequest(http.MethodGet, "/files?path="+p+"&username=user", nil)
			r.Header.Set("Accept-Encoding", "gzip")
			return r
		}, e.h},
		{"download/floor", func() *http.Request { return httptest.NewRequest(http.MethodGet, p, nil) }, fl},
		{"upload/envd", func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, "/files?path="+p+".up&username=user", bytes.NewReader(mp.Bytes()))
			r.Header.Set("Content-Type", mw.FormDataContentType())
			return r
		}, e.h},
		{"upload/floor", func() *http.Request { return httptest.NewRequest(http.MethodPut, p+".fl", bytes.NewReader(data)) }, fl},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				w := httptest.NewRecorder()
				c.h.ServeHTTP(w, c.req())
				if w.Code/100 != 2 {
					b.Fatal(w.Code, w.Body.String())
				}
			}
		})
	}
}
