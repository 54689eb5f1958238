package server_test

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/moatsh/moat/internal/testkit"
)

// content calls the volume content API with token.
func (h *harness) content(method, path, token string, body io.Reader) resp {
	h.t.Helper()
	req, _ := http.NewRequest(method, h.url+path, body)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return h.send(req)
}

// TestVolumeContent drives every volume content operation on a real
// loop-mounted volume (root only), then the refusals: a bad token, '..',
// symlinks and a FIFO planted as a sandbox would, and a write past the
// volume's size.
func TestVolumeContent(t *testing.T) {
	testkit.RequireRoot(t) // loop mounts
	h, _, vols := newVolumeHarnessM(t)
	r := h.do("POST", "/volumes", `{"name":"c","sizeMB":8}`)
	var v struct{ VolumeID, Token string }
	r.json(t, &v)
	base := "/volumecontent/" + v.VolumeID
	tok := v.Token
	ok := func(r resp, status int) resp {
		t.Helper()
		if r.status != status {
			t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
		}
		return r
	}
	var e struct {
		Name, Path, Type string
		Size             int64
		Mode, UID, GID   uint32
	}
	w := ok(h.content("PUT", base+"/file?path=/a/b/hello.txt", tok, strings.NewReader("hi there")), 201)
	w.json(t, &e)
	if e.Path != "/a/b/hello.txt" || e.Type != "file" || e.Size != 8 || e.UID != 1000 {
		t.Fatalf("write: %+v", e)
	}
	// The wire names are the API's (VolumeEntryStat), exactly.
	var raw map[string]any
	w.json(t, &raw)
	for _, k := range []string{"name", "path", "type", "size", "mode", "uid", "gid", "atime", "mtime", "ctime"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("write answer %s has no %q", w.body, k)
		}
	}
	if len(raw) != 10 {
		t.Errorf("write answer %s: want exactly the 10 fields of VolumeEntryStat (target only for symlinks)", w.body)
	}
	if got := ok(h.content("GET", base+"/file?path=a/b/hello.txt", tok, nil), 200).body; string(got) != "hi there" {
		t.Fatalf("read %q", got)
	}
	ok(h.content("POST", base+"/dir?path=/d/e&force=true&mode=448", tok, nil), 201).json(t, &e)
	if e.Type != "directory" || e.Mode != 0o700 {
		t.Fatalf("mkdir: %+v", e)
	}
	h.content("POST", base+"/dir?path=/d", tok, nil).errBody(t, http.StatusConflict)
	var list []struct{ Path string }
	ok(h.content("GET", base+"/dir?path=/&depth=3", tok, nil), 200).json(t, &list)
	if len(list) != 6 { // a a/b a/b/hello.txt d d/e lost+found
		t.Fatalf("list: %s", r.body)
	}
	ok(h.content("PATCH", base+"/path?path=/a/b/hello.txt", tok, strings.NewReader(`{"mode":384,"uid":0}`)), 200).json(t, &e)
	if e.Mode != 0o600 || e.UID != 0 {
		t.Fatalf("patch: %+v", e)
	}
	ok(h.content("DELETE", base+"/path?path=/a", tok, nil), 204)
	h.content("GET", base+"/path?path=/a", tok, nil).errBody(t, http.StatusNotFound)

	// Plant what a sandbox could: symlinks out of the volume and a FIFO.
	root, release, err := vols.Acquire(v.VolumeID)
	if err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"etc": "/etc", "up": "../../../../..", "self": "."} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	release()

	h.content("GET", base+"/file?path=/x", "wrong", nil).errBody(t, http.StatusUnauthorized)
	h.content("GET", base+"/file?path=/x", "", nil).errBody(t, http.StatusUnauthorized)
	h.content("GET", "/volumecontent/nope/file?path=/x", tok, nil).errBody(t, http.StatusUnauthorized)
	for _, tc := range []struct{ method, path string }{
		{"GET", "/file?path=/../etc/passwd"},
		{"GET", "/file?path=d/../../x"},
		{"GET", "/file?path=/etc/passwd"},
		{"GET", "/file?path=/etc"},
		{"GET", "/file?path=/up/etc/passwd"},
		{"GET", "/dir?path=/self"},
		{"GET", "/path?path=/etc/passwd"},
		{"PUT", "/file?path=/etc/moat-test"},
		{"PUT", "/file?path=/up/tmp/moat-test"},
		{"POST", "/dir?path=/etc/moat-test"},
		{"DELETE", "/path?path=/etc/hostname"},
		{"PATCH", "/path?path=/etc/passwd"},
		{"PATCH", "/path?path=/etc"},
		{"GET", "/file?path=/fifo"},
		{"PUT", "/file?path=/fifo"},
		{"GET", "/dir?path=/&depth=0"},
		{"POST", "/dir?path=/z&mode=-1"},
	} {
		var body io.Reader
		if tc.method == "PATCH" {
			body = strings.NewReader(`{"mode":511}`)
		} else if tc.method == "PUT" {
			body = strings.NewReader("x")
		}
		if r := h.content(tc.method, base+tc.path, tok, body); r.status != http.StatusBadRequest {
			t.Errorf("%s %s: %d %s, want 400", tc.method, tc.path, r.status, r.body)
		} else {
			r.errBody(t, http.StatusBadRequest)
		}
	}
	// The symlink itself is an entry: stat shows it without following.
	ok(h.content("GET", base+"/path?path=/etc", tok, nil), 200).json(t, &e)
	if e.Type != "symlink" {
		t.Fatalf("stat symlink: %+v", e)
	}
	ok(h.content("DELETE", base+"/path?path=/etc", tok, nil), 204)
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatal("the symlink's target went too")
	}

	// The quota: a write past 8 MiB fails with 507, and the volume is
	// still usable after.
	big := bytes.Repeat([]byte{'x'}, 16<<20)
	h.content("PUT", base+"/file?path=/big", tok, bytes.NewReader(big)).errBody(t, http.StatusInsufficientStorage)
	ok(h.content("DELETE", base+"/path?path=/big", tok, nil), 204)
	ok(h.content("PUT", base+"/file?path=/small", tok, strings.NewReader("ok")), 201)
	if n := vols.Users(v.VolumeID); n != 0 {
		t.Fatalf("volume still held by %d", n)
	}

	// Delete: refused while held (as a sandbox's mount holds it), then
	// unmounts and frees the image.
	root, release, err = vols.Acquire(v.VolumeID)
	if err != nil {
		t.Fatal(err)
	}
	h.do("DELETE", "/volumes/"+v.VolumeID, "").errBody(t, http.StatusConflict)
	release()
	ok(h.do("DELETE", "/volumes/"+v.VolumeID, ""), http.StatusNoContent)
	if _, err := os.Stat(filepath.Dir(root)); !os.IsNotExist(err) {
		t.Fatalf("volume dir left: %v", err)
	}
	h.content("GET", base+"/path?path=/", tok, nil).errBody(t, http.StatusUnauthorized)
}
