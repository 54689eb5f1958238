package volume

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/errdefs"
)

func TestClean(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		bad  bool
	}{
		{"", nil, false},
		{"/", nil, false},
		{".", nil, false},
		{"/a/b", []string{"a", "b"}, false},
		{"a//./b/", []string{"a", "b"}, false},
		{"..", nil, true},
		{"/a/../../etc/passwd", nil, true},
		{"a/..", nil, true},
		{"a\x00b", nil, true},
		{"/" + strings.Repeat("x", 256), nil, true},
		{strings.Repeat("/a", 3000), nil, true},
		{"...", []string{"..."}, false},
	} {
		got, err := Clean(tc.in)
		if tc.bad {
			if !errdefs.IsInvalidArgument(err) {
				t.Errorf("Clean(%q) = %v, %v; want invalid argument", tc.in, got, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Clean(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// FuzzClean: whatever the input, an accepted path's components are
// non-empty, never "." or "..", hold no '/' or NUL, and join to a local
// path.
func FuzzClean(f *testing.F) {
	for _, s := range []string{"", "/", "a/b", "../x", "/a/./b//c", "a\x00", "..."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		comps, err := Clean(p)
		if err != nil {
			return
		}
		for _, c := range comps {
			if c == "" || c == "." || c == ".." || strings.ContainsAny(c, "/\x00") {
				t.Fatalf("Clean(%q) gave component %q", p, c)
			}
		}
		if len(comps) > 0 && !filepath.IsLocal(filepath.Join(comps...)) {
			t.Fatalf("Clean(%q) = %q, not local", p, comps)
		}
	})
}
