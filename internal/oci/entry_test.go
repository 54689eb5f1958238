package oci

import (
	"errors"
	"path"
	"strings"
	"testing"
)

func TestParseEntry(t *testing.T) {
	tests := []struct {
		name string
		want entry
		err  bool
	}{
		{"etc/passwd", entry{kind: entryFile, path: "etc/passwd", dir: "etc", base: "passwd"}, false},
		{"./etc/", entry{kind: entryFile, path: "etc", dir: "", base: "etc"}, false},
		{"./", entry{kind: entryRoot}, false},
		{".", entry{kind: entryRoot}, false},
		{"a//b/./c", entry{kind: entryFile, path: "a/b/c", dir: "a/b", base: "c"}, false},
		{"etc/.wh.motd", entry{kind: entryWhiteout, path: "etc/motd", dir: "etc", base: "motd"}, false},
		{".wh.tmp", entry{kind: entryWhiteout, path: "tmp", dir: "", base: "tmp"}, false},
		{"opt/.wh..wh..opq", entry{kind: entryOpaque, path: "opt", dir: "opt"}, false},
		{".wh..wh..opq", entry{kind: entryOpaque}, false},
		{"x/.wh..wh.plnk/123", entry{kind: entryFile, path: "x/.wh..wh.plnk/123", dir: "x/.wh..wh.plnk", base: "123"}, false},
		{"x/.wh..wh.aufs", entry{kind: entryMeta, path: "x/.wh..wh.aufs", dir: "x", base: ".wh..wh.aufs"}, false},
		{"", entry{}, true},
		{"/etc/passwd", entry{}, true},
		{"../x", entry{}, true},
		{"a/../../x", entry{}, true},
		{"a/..", entry{}, true},
		{"a\x00b", entry{}, true},
		{"etc/.wh.", entry{}, true},
		{"etc/.wh..", entry{}, true},
		{"etc/.wh...", entry{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseEntry(tt.name)
			if tt.err {
				if !errors.Is(err, ErrUnsafeLayer) {
					t.Fatalf("parseEntry(%q) = %+v, %v; want ErrUnsafeLayer", tt.name, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("parseEntry(%q) = %+v, %v; want %+v", tt.name, got, err, tt.want)
			}
		})
	}
}

// FuzzParseEntry checks that every accepted name stays below the root.
func FuzzParseEntry(f *testing.F) {
	for _, s := range []string{"etc/passwd", "./a/", "../x", "/abs", "a/.wh.b", "a/.wh..wh..opq", ".wh...", "a//./b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		e, err := parseEntry(name)
		if err != nil {
			if !errors.Is(err, ErrUnsafeLayer) {
				t.Fatalf("error without kind: %v", err)
			}
			return
		}
		for _, p := range []string{e.path, e.dir} {
			if p == "" {
				continue
			}
			if strings.HasPrefix(p, "/") || path.Clean(p) != p || strings.IndexByte(p, 0) >= 0 {
				t.Fatalf("%q: unclean path %q", name, p)
			}
			for elem := range strings.SplitSeq(p, "/") {
				if elem == ".." || elem == "." || elem == "" {
					t.Fatalf("%q: bad element in %q", name, p)
				}
			}
		}
		switch e.kind {
		case entryFile, entryWhiteout, entryMeta:
			if e.base == "" || strings.Contains(e.base, "/") || joinPath(e.dir, e.base) != e.path {
				t.Fatalf("%q: inconsistent %+v", name, e)
			}
		case entryOpaque:
			if e.path != e.dir {
				t.Fatalf("%q: inconsistent %+v", name, e)
			}
		case entryRoot:
			if e.path != "" {
				t.Fatalf("%q: root with path %q", name, e.path)
			}
		}
	})
}
