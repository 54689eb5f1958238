package server_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/build"
	"github.com/moatsh/moat/internal/server"
	"github.com/moatsh/moat/internal/store"
)

// uploadLink asks the files route for hash's upload URL.
func (h *harness) uploadLink(tid, hash string) (present bool, url string) {
	h.t.Helper()
	r := h.do("GET", "/templates/"+tid+"/files/"+hash, "")
	if r.status != http.StatusCreated {
		h.t.Fatalf("files: %d %s", r.status, r.body)
	}
	var out struct {
		Present bool   `json:"present"`
		URL     string `json:"url"`
	}
	r.json(h.t, &out)
	return out.Present, out.URL
}

func putBody(t *testing.T, url string, body interface{ Read([]byte) (int, error) }, size int64) error {
	t.Helper()
	req, err := http.NewRequest("PUT", url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return errors.New(res.Status)
	}
	return nil
}

// brokenUpload sends a PUT whose body ends before its Content-Length and
// reads until the server closes the connection, that is until the
// handler has returned: a client that dies mid-upload.
func brokenUpload(t *testing.T, rawURL string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "PUT %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", u.RequestURI(), u.Host, 2<<20)
	if _, err := c.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.ReadAll(c)
}

// TestUploadsGC: uploads unused for a day go (partial ones a crash left
// too), recently used ones stay, a files check that finds one renews it,
// and a failed upload leaves nothing behind.
func TestUploadsGC(t *testing.T) {
	h, now, bc := newBuildHarnessConfig(t)
	ids := h.requestBuild(h.key, "gc")
	dir := build.FilesDir(bc.DataDir, store.DefaultTeam)
	hashes := []string{strings.Repeat("a1", 32), strings.Repeat("b2", 32), strings.Repeat("c3", 32)}
	for _, hash := range hashes {
		_, u := h.uploadLink(ids.TemplateID, hash)
		if err := putBody(t, u, strings.NewReader("tar"), 3); err != nil {
			t.Fatal(err)
		}
	}
	// A client that dies mid-upload leaves no partial file.
	_, u := h.uploadLink(ids.TemplateID, strings.Repeat("d4", 32))
	brokenUpload(t, u)
	if partial, _ := filepath.Glob(filepath.Join(dir, ".upload-*")); len(partial) != 0 {
		t.Fatalf("partial upload left behind: %v", partial)
	}
	if _, err := os.Stat(build.FilesPath(bc.DataDir, store.DefaultTeam, strings.Repeat("d4", 32))); !os.IsNotExist(err) {
		t.Fatalf("broken upload became visible: %v", err)
	}

	// Two days later: the first was checked again (renewed), a crash left
	// a partial upload.
	old := time.Unix(now.Load(), 0)
	for _, p := range append([]string{filepath.Join(dir, ".upload-123")}, hashPaths(bc, hashes)...) {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		_ = os.Chtimes(p, old, old)
	}
	now.Add(int64(2 * 24 * time.Hour / time.Second))
	if present, _ := h.uploadLink(ids.TemplateID, hashes[0]); !present {
		t.Fatal("upload not present")
	}
	n, freed, err := bc.RemoveStaleUploads(server.UploadMaxAge)
	if err != nil || n != 3 || freed != 3 {
		t.Fatalf("gc: %d files, %d bytes, %v; want 3, 3", n, freed, err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(left) != 1 || filepath.Base(left[0]) != hashes[0]+".tar" {
		t.Fatalf("left %v, want only the renewed upload", left)
	}
	// The removed ones are no longer present: the SDK uploads them again.
	if present, _ := h.uploadLink(ids.TemplateID, hashes[1]); present {
		t.Fatal("removed upload still present")
	}
}

func hashPaths(bc *server.BuildConfig, hashes []string) []string {
	var out []string
	for _, h := range hashes {
		out = append(out, build.FilesPath(bc.DataDir, store.DefaultTeam, h))
	}
	return out
}
