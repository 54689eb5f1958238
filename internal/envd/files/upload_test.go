package files

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/envd/xattrmeta"
)

// upload posts data to POST /files?path=p as application/octet-stream.
func (e *filesEnv) upload(t *testing.T, p, data string, hdr http.Header) (int, []byte) {
	t.Helper()
	r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/files?path="+url.QueryEscape(p), strings.NewReader(data))
	r.Header = hdr.Clone()
	if r.Header == nil {
		r.Header = http.Header{}
	}
	r.Header.Set("Content-Type", "application/octet-stream")
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w.Code, w.Body.Bytes()
}

// TestUploadMetadata follows E2B's upload: the X-Metadata-* set replaces
// the file's whole user.e2b.* set, a repeated header counts with its first
// value, and the answer carries the set as read back from the file.
func TestUploadMetadata(t *testing.T) {
	e := newFilesEnv(t, nil)
	p := filepath.Join(e.home, "m.txt")
	probe := e.write(t, "probe", "")
	if err := unix.Setxattr(probe, "user.probe", []byte("1"), 0); err != nil {
		t.Skipf("no user xattrs here: %v", err)
	}
	steps := []struct {
		name string
		hdr  http.Header
		want map[string]string
	}{
		{"set", http.Header{"X-Metadata-Owner": {"Alice"}, "X-Metadata-Tag": {"v1", "v2"}},
			map[string]string{"owner": "Alice", "tag": "v1"}},
		{"replace", http.Header{"X-Metadata-Tag": {"v3"}}, map[string]string{"tag": "v3"}},
		{"clear", nil, nil},
	}
	for _, st := range steps {
		code, body := e.upload(t, p, st.name, st.hdr)
		if code != http.StatusOK {
			t.Fatalf("%s: status %d: %s", st.name, code, body)
		}
		var got []EntryInfo
		if err := json.Unmarshal(body, &got); err != nil || len(got) != 1 {
			t.Fatalf("%s: answer %s (%v)", st.name, body, err)
		}
		if !maps.Equal(got[0].Metadata, st.want) || (st.want == nil && strings.Contains(string(body), "metadata")) {
			t.Fatalf("%s: answer metadata %v, want %v", st.name, got[0].Metadata, st.want)
		}
		if onDisk, err := xattrmeta.Read(p); err != nil || !maps.Equal(onDisk, st.want) {
			t.Fatalf("%s: stored %v (%v), want %v", st.name, onDisk, err, st.want)
		}
	}
}

// TestUploadMetadataRefused: invalid metadata is a 400 before anything is
// written.
func TestUploadMetadataRefused(t *testing.T) {
	e := newFilesEnv(t, nil)
	p := filepath.Join(e.home, "never.txt")
	for _, hdr := range []http.Header{
		{"X-Metadata-K": {"caf\u00e9"}},
		{"X-Metadata-" + strings.Repeat("k", 247): {"v"}},
		{"X-Metadata-A": {strings.Repeat("v", 4087)}},
	} {
		code, body := e.upload(t, p, "x", hdr)
		if code != http.StatusBadRequest || !strings.Contains(string(body), `"message":"invalid metadata: `) {
			t.Fatalf("status %d: %s", code, body)
		}
		if exists(p) {
			t.Fatal("a file was written despite invalid metadata")
		}
	}
}

// TestStoreMetadataUnsupported: on a file system without xattrs the body
// stays, the answer claims no metadata and the upload succeeds (E2B logs
// and goes on).
func TestStoreMetadataUnsupported(t *testing.T) {
	e := newFilesEnv(t, nil)
	f, err := os.Open("/proc/self/comm")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	if err := unix.Fsetxattr(int(f.Fd()), "user.e2b.k", []byte("v"), 0); !xattrmeta.Unsupported(err) {
		t.Skipf("procfs answers %v here, not ENOTSUP", err)
	}
	got, err := e.h.storeMetadata(f, f.Name(), map[string]string{"k": "v"})
	if got != nil || err != nil {
		t.Fatalf("storeMetadata = %v, %v", got, err)
	}
}
