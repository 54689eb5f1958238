package envd_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/envd/envdtest"
)

func TestUploadDownloadSDKFrames(t *testing.T) {
	e := envdtest.Start(t)
	abs := filepath.Join(e.Home, "dir", "a.txt")

	// files.write(path, data): path query + one part with filename = path.
	ct, body := multipartBody(t, part{"file", abs, []byte("hello")})
	got := entries(t, do(t, "POST", e.URL+"/files?path="+url.QueryEscape(abs), map[string]string{"Content-Type": ct}, body))
	if len(got) != 1 || got[0].Path != abs || got[0].Name != "a.txt" || got[0].Type != "file" || got[0].Metadata != nil {
		t.Fatalf("single upload = %+v", got)
	}

	// files.write([...]): no path query, filenames keep their directories;
	// relative ones resolve against home.
	ct, body = multipartBody(t,
		part{"file", "rel/b.txt", []byte("bee")},
		part{"other", "ignored.txt", []byte("x")},
		part{"file", filepath.Join(e.Home, "c.txt"), []byte("sea")})
	got = entries(t, do(t, "POST", e.URL+"/files?username=user", map[string]string{"Content-Type": ct}, body))
	if len(got) != 2 || got[0].Path != filepath.Join(e.Home, "rel", "b.txt") || got[1].Path != filepath.Join(e.Home, "c.txt") {
		t.Fatalf("multi upload = %+v", got)
	}
	if _, err := os.Stat(filepath.Join(e.Home, "ignored.txt")); err == nil {
		t.Fatal("a part not named file was written")
	}

	// useOctetStream with gzip.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("zipped"))
	zw.Close()
	got = entries(t, do(t, "POST", e.URL+"/files?path=z/d.txt", map[string]string{
		"Content-Type": "application/octet-stream", "Content-Encoding": "gzip"}, &gz))
	if got[0].Path != filepath.Join(e.Home, "z", "d.txt") {
		t.Fatalf("octet upload = %+v", got)
	}

	tests := []struct{ path, want string }{
		{abs, "hello"}, {"rel/b.txt", "bee"}, {"~/c.txt", "sea"}, {"z/d.txt", "zipped"},
	}
	for _, tt := range tests {
		r := do(t, "GET", e.URL+"/files?path="+url.QueryEscape(tt.path), nil, nil)
		if r.Status != 200 || string(r.Body) != tt.want {
			t.Fatalf("GET %s = %d %q", tt.path, r.Status, r.Body)
		}
		if cd := r.Header.Get("Content-Disposition"); cd != "inline; filename="+filepath.Base(tt.path) {
			t.Fatalf("Content-Disposition = %q", cd)
		}
		if r.Header.Get("Vary") != "Accept-Encoding" {
			t.Fatalf("Vary = %q", r.Header.Get("Vary"))
		}
	}

	// files.read(..., {gzip:true}): data that compresses comes gzipped; a
	// tiny file comes as it is (gzip would not pay; identity is acceptable).
	long := strings.Repeat("hello moat, line after line\n", 1000)
	longPath := filepath.Join(e.Home, "dir", "long.txt")
	if err := os.WriteFile(longPath, []byte(long), 0o644); err != nil {
		t.Fatal(err)
	}
	r := do(t, "GET", e.URL+"/files?path="+url.QueryEscape(longPath), map[string]string{"Accept-Encoding": "gzip"}, nil)
	if r.Header.Get("Content-Encoding") != "gzip" || r.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Fatalf("gzip download headers %v", r.Header)
	}
	zr, err := gzip.NewReader(bytes.NewReader(r.Body))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(zr); string(b) != long {
		t.Fatalf("gzip download: %d bytes, want %d", len(b), len(long))
	}
	r = do(t, "GET", e.URL+"/files?path="+url.QueryEscape(abs), map[string]string{"Accept-Encoding": "gzip"}, nil)
	if r.Status != 200 || r.Header.Get("Content-Encoding") != "" || string(r.Body) != "hello" {
		t.Fatalf("tiny file with gzip accepted: %d %v %q", r.Status, r.Header, r.Body)
	}

	// Range requests work on identity downloads.
	r = do(t, "GET", e.URL+"/files?path="+url.QueryEscape(abs), map[string]string{"Range": "bytes=1-2"}, nil)
	if r.Status != http.StatusPartialContent || string(r.Body) != "el" {
		t.Fatalf("range = %d %q", r.Status, r.Body)
	}
}

func TestFilesErrors(t *testing.T) {
	e := envdtest.Start(t)
	if err := os.Mkdir(filepath.Join(e.Home, "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	octet := map[string]string{"Content-Type": "application/octet-stream"}
	dupCT, dupBody := multipartBody(t, part{"file", "same.txt", []byte("1")}, part{"file", "./same.txt", []byte("2")})
	tests := []struct {
		name, method, query string
		hdr                 map[string]string
		body                string
		status              int
		msg                 string
	}{
		{"missing file", "GET", "path=nope.txt", nil, "", 404, "path '" + filepath.Join(e.Home, "nope.txt") + "' does not exist"},
		{"directory download", "GET", "path=adir", nil, "", 400, "is a directory"},
		{"empty path is home dir", "GET", "", nil, "", 400, "is a directory"},
		{"unknown user download", "GET", "path=a&username=nosuchuser-moat", nil, "", 401, "invalid username"},
		{"unknown user upload", "POST", "path=a&username=nosuchuser-moat", octet, "x", 401, "invalid username"},
		{"NUL byte download", "GET", "path=a%00b", nil, "", 400, "NUL"},
		{"NUL byte upload", "POST", "path=a%00b", octet, "x", 400, "NUL"},
		{"octet without path", "POST", "", octet, "x", 400, "path"},
		{"unsupported content type", "POST", "path=a", map[string]string{"Content-Type": "text/plain"}, "x", 400, "content type"},
		{"no content type", "POST", "path=a", nil, "x", 400, "content type"},
		{"upload onto directory", "POST", "path=adir", octet, "x", 400, "is a directory"},
		{"bad gzip", "POST", "path=g", map[string]string{"Content-Type": "application/octet-stream", "Content-Encoding": "gzip"}, "notgzip", 400, "gzip"},
		{"duplicate destination", "POST", "", map[string]string{"Content-Type": dupCT}, dupBody.String(), 400, "twice"},
		{"metadata not printable", "POST", "path=m", map[string]string{"Content-Type": "application/octet-stream", "X-Metadata-K": "caf\u00e9"}, "x", 400, "printable"},
		{"metadata key too long", "POST", "path=m", map[string]string{"Content-Type": "application/octet-stream", "X-Metadata-" + strings.Repeat("k", 247): "v"}, "x", 400, "longer"},
		{"metadata too large", "POST", "path=m", map[string]string{"Content-Type": "application/octet-stream", "X-Metadata-A": strings.Repeat("v", 4096)}, "x", 400, "larger"},
		{"multipart without file part", "POST", "path=a", map[string]string{"Content-Type": "multipart/form-data; boundary=xx"}, "--xx--\r\n", 400, "no file part"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader
			if tt.body != "" {
				body = strings.NewReader(tt.body)
			}
			r := do(t, tt.method, e.URL+"/files?"+tt.query, tt.hdr, body)
			if r.Status != tt.status {
				t.Fatalf("status = %d, want %d; body %s", r.Status, tt.status, r.Body)
			}
			if msg := r.err(t).Message; !strings.Contains(msg, tt.msg) {
				t.Fatalf("message %q does not contain %q", msg, tt.msg)
			}
		})
	}
}

func TestUploadPathTraversal(t *testing.T) {
	e := envdtest.Start(t)
	// Relative paths are joined to the user's home and cleaned, as in E2B:
	// ".." climbs out of home (envd is not a jail; the OS user is).
	got := entries(t, do(t, "POST", e.URL+"/files?username=user&path=../escaped.txt",
		map[string]string{"Content-Type": "application/octet-stream"}, strings.NewReader("x")))
	if want := filepath.Join(filepath.Dir(e.Home), "escaped.txt"); got[0].Path != want {
		t.Fatalf("path = %q, want %q", got[0].Path, want)
	}
	r := do(t, "GET", e.URL+"/files?username=user&path="+url.QueryEscape("../../../../../../../../etc/hostname"), nil, nil)
	want, err := os.ReadFile("/etc/hostname")
	if err == nil && (r.Status != 200 || !bytes.Equal(r.Body, want)) {
		t.Fatalf("GET ../../etc/hostname = %d %q", r.Status, r.Body)
	}
}

func TestUploadMetadata(t *testing.T) {
	e := envdtest.Start(t)
	p := filepath.Join(e.Home, "meta.txt")
	r := do(t, "POST", e.URL+"/files?path="+p, map[string]string{
		"Content-Type": "application/octet-stream", "X-Metadata-Owner": "Alice", "X-Metadata-Tag": "v1"}, strings.NewReader("x"))
	// envd stores metadata as user xattrs; on a file system without them it
	// writes the file and drops the metadata (E2B's behaviour), which fails
	// here: the test home must be on a file system with user xattrs.
	got := entries(t, r)
	if got[0].Metadata["owner"] != "Alice" || got[0].Metadata["tag"] != "v1" {
		t.Fatalf("metadata = %v", got[0].Metadata)
	}
	buf := make([]byte, 64)
	n, err := unix.Getxattr(p, "user.e2b.owner", buf)
	if err != nil || string(buf[:n]) != "Alice" {
		t.Fatalf("xattr = %q, %v", buf[:n], err)
	}
	// A new upload without metadata clears the set.
	entries(t, do(t, "POST", e.URL+"/files?path="+p, map[string]string{"Content-Type": "application/octet-stream"}, strings.NewReader("y")))
	if _, err := unix.Getxattr(p, "user.e2b.owner", buf); err == nil {
		t.Fatal("metadata survived an upload without metadata")
	}
}
