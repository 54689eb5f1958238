package xattrmeta

import (
	"errors"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/errdefs"
)

// TestFromHeaders follows E2B's upload_metadata_test.go: prefix stripped,
// keys lowercased, a bare prefix dropped, the first of repeated values.
func TestFromHeaders(t *testing.T) {
	tests := []struct {
		name string
		hdr  http.Header
		want map[string]string
	}{
		{"none", http.Header{"X-Access-Token": {"abc"}}, nil},
		{"single", http.Header{"X-Metadata-Author": {"mish"}}, map[string]string{"author": "mish"}},
		{"canonicalised and mixed case", mkHeader("X-Metadata-Author", "mish", "x-metadata-purpose", "upload",
			"Content-Type", "application/octet-stream"), map[string]string{"author": "mish", "purpose": "upload"}},
		{"bare prefix dropped", http.Header{"X-Metadata-": {"ignored"}}, nil},
		{"first value wins", http.Header{"X-Metadata-Author": {"first", "second"}}, map[string]string{"author": "first"}},
		{"no values", http.Header{"X-Metadata-Author": {}}, nil},
		{"non canonical key kept lowercased", http.Header{"x-metadata-My_Key": {"v"}}, map[string]string{"my_key": "v"}},
		{"empty value kept", http.Header{"X-Metadata-Empty": {""}}, map[string]string{"empty": ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FromHeaders(tt.hdr)
			if (got == nil) != (tt.want == nil) || !maps.Equal(got, tt.want) {
				t.Fatalf("FromHeaders = %v, want %v", got, tt.want)
			}
		})
	}
}

// mkHeader builds a header with Set, which canonicalises the names as the
// HTTP server does.
func mkHeader(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// TestValidate follows E2B's ValidateMetadata: printable ASCII, keys of at
// most 246 bytes, and a total that counts the "user.e2b." prefix per key.
func TestValidate(t *testing.T) {
	long := strings.Repeat("k", MaxKeyLen)
	tests := []struct {
		name    string
		meta    map[string]string
		wantErr string
	}{
		{"nil", nil, ""},
		{"simple", map[string]string{"owner": "Alice", "tag": "v 1 ~"}, ""},
		{"empty value", map[string]string{"k": ""}, ""},
		{"key 246", map[string]string{long: "v"}, ""},
		{"key 247", map[string]string{long + "k": "v"}, "longer than 246 bytes"},
		{"empty key", map[string]string{"": "v"}, "must not be empty"},
		{"key control byte", map[string]string{"a\x01": "v"}, "metadata key contains non-printable-ASCII byte 0x01 at offset 1"},
		{"value tab", map[string]string{"k": "a\tb"}, `value for key "k" contains non-printable-ASCII byte 0x09 at offset 1`},
		{"value DEL", map[string]string{"k": "\x7f"}, "0x7f"},
		{"value non ascii", map[string]string{"k": "caf\u00e9"}, "0xc3 at offset 3"},
		{"total exactly 4096", map[string]string{"a": strings.Repeat("v", MaxTotalLen-len(Prefix)-1)}, ""},
		{"total 4097", map[string]string{"a": strings.Repeat("v", MaxTotalLen-len(Prefix))}, "total metadata size 4097 is larger than 4096"},
		{"total over several keys", map[string]string{"a": strings.Repeat("v", 2000), "b": strings.Repeat("v", 2080)}, "larger than 4096"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(tt.meta)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want %q", err, tt.wantErr)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "invalid metadata: ") {
				t.Fatalf("Validate error %q: wrong kind or text", err)
			}
		})
	}
}

// xattrFile creates a file in a temporary directory, skipping the test
// when that file system has no user xattrs.
func xattrFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(p, "user.probe", []byte("1"), 0); err != nil {
		t.Skipf("no user xattrs here: %v", err)
	}
	if err := unix.Removexattr(p, "user.probe"); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReplaceRead(t *testing.T) {
	p := xattrFile(t)
	if err := unix.Setxattr(p, "user.other", []byte("kept"), 0); err != nil {
		t.Fatal(err)
	}
	steps := []map[string]string{
		{"owner": "Alice", "tag": "v1"},
		{"tag": "v2", "new": ""}, // owner dropped, tag replaced
		nil,                      // clears
	}
	for i, meta := range steps {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := Replace(f, meta); err != nil {
			t.Fatalf("step %d: Replace: %v", i, err)
		}
		fromFd, err := ReadFile(f)
		f.Close()
		if err != nil {
			t.Fatalf("step %d: ReadFile: %v", i, err)
		}
		fromPath, err := Read(p)
		if err != nil {
			t.Fatalf("step %d: Read: %v", i, err)
		}
		if !maps.Equal(fromFd, meta) || !maps.Equal(fromPath, meta) || (meta == nil && fromPath != nil) {
			t.Fatalf("step %d: read %v / %v, want %v", i, fromFd, fromPath, meta)
		}
	}
	buf := make([]byte, 16)
	if n, err := unix.Getxattr(p, "user.other", buf); err != nil || string(buf[:n]) != "kept" {
		t.Fatalf("a foreign xattr was touched: %q %v", buf[:n], err)
	}
}

// TestReadSkipsInvalidUTF8 keeps a metadata entry set inside the sandbox
// with arbitrary bytes from poisoning the proto answer (E2B ReadMetadata).
func TestReadSkipsInvalidUTF8(t *testing.T) {
	p := xattrFile(t)
	for name, val := range map[string]string{
		Prefix + "good":     "yes",
		Prefix + "badvalue": "\xff\xfe",
		Prefix + "bad\xffk": "v",
		Prefix:              "empty key", // E2B reports it under ""
	} {
		if err := unix.Setxattr(p, name, []byte(val), 0); err != nil {
			t.Fatalf("setxattr %q: %v", name, err)
		}
	}
	got, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"good": "yes", "": "empty key"}; !maps.Equal(got, want) {
		t.Fatalf("Read = %q, want %q", got, want)
	}
}

func TestReadFollowsSymlinks(t *testing.T) {
	p := xattrFile(t)
	if err := unix.Setxattr(p, Prefix+"color", []byte("blue"), 0); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(filepath.Dir(p), "link")
	if err := os.Symlink("f", link); err != nil {
		t.Fatal(err)
	}
	if got, err := Read(link); err != nil || got["color"] != "blue" {
		t.Fatalf("Read(link) = %v, %v", got, err)
	}
	dangling := filepath.Join(filepath.Dir(p), "dangling")
	if err := os.Symlink("nowhere", dangling); err != nil {
		t.Fatal(err)
	}
	if got, err := Read(dangling); got != nil || !errors.Is(err, unix.ENOENT) {
		t.Fatalf("Read(dangling) = %v, %v", got, err)
	}
}

// TestUnsupported checks the classification on a file system without
// xattr handlers (procfs).
func TestUnsupported(t *testing.T) {
	f, err := os.Open("/proc/self/comm")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	err = Replace(f, map[string]string{"k": "v"})
	if err == nil {
		t.Skip("procfs accepted a user xattr here")
	}
	if !Unsupported(err) {
		t.Skipf("procfs refused with %v, not ENOTSUP", err)
	}
	if got, err := ReadFile(f); got != nil || err != nil {
		t.Fatalf("ReadFile on procfs = %v, %v", got, err)
	}
	if Unsupported(unix.EPERM) || !Unsupported(unix.EOPNOTSUPP) {
		t.Fatal("Unsupported misclassifies")
	}
}

// FuzzMetadata checks that whatever headers arrive, FromHeaders+Validate
// either refuse them as invalid_argument or yield a set that obeys E2B's
// limits and can be stored as xattr names.
func FuzzMetadata(f *testing.F) {
	f.Add("X-Metadata-Owner", "Alice", "X-Metadata-Tag", "v1")
	f.Add("x-metadata-a", "caf\u00e9", "X-Metadata-", "x")
	f.Add("X-Metadata-"+strings.Repeat("k", 247), "v", "Other", "\x00")
	f.Fuzz(func(t *testing.T, n1, v1, n2, v2 string) {
		h := http.Header{}
		h.Add(n1, v1)
		h.Add(n2, v2)
		meta := FromHeaders(h)
		err := Validate(meta)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error of the wrong kind: %v", err)
			}
			return
		}
		total := 0
		for k, v := range meta {
			if k == "" || len(k) > MaxKeyLen || nonPrintable(k) >= 0 || nonPrintable(v) >= 0 || k != strings.ToLower(k) {
				t.Fatalf("accepted %q=%q", k, v)
			}
			if strings.IndexByte(k, 0) >= 0 || len(Prefix+k) > 255 {
				t.Fatalf("key %q is no xattr name", k)
			}
			total += len(Prefix) + len(k) + len(v)
		}
		if total > MaxTotalLen {
			t.Fatalf("accepted %d bytes", total)
		}
	})
}
