package paths

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/errdefs"
)

func TestResolve(t *testing.T) {
	tests := []struct {
		p, home, workdir, want string
		wantErr                bool
	}{
		{"", "/home/user", "", "/home/user", false},
		{"", "/home/user", "/work", "/work", false},
		{"~", "/home/user", "/work", "/home/user", false},
		{"~/a/b", "/home/user", "", "/home/user/a/b", false},
		{"~root", "/home/user", "", "", true},
		{"a.txt", "/home/user", "/work", "/home/user/a.txt", false},
		{"../../etc/passwd", "/home/user", "", "/etc/passwd", false},
		{"/tmp/../etc//x/", "/home/user", "", "/etc/x", false},
		{"/a\x00b", "/home/user", "", "", true},
		{strings.Repeat("a", MaxLen+1), "/home/user", "", "", true},
		{"x", "", "", "/x", false},
	}
	for _, tt := range tests {
		got, err := Resolve(tt.p, tt.home, tt.workdir)
		if (err != nil) != tt.wantErr {
			t.Errorf("Resolve(%q) err = %v, wantErr %v", tt.p, err, tt.wantErr)
			continue
		}
		if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Resolve(%q) err kind = %v", tt.p, err)
		}
		if got != tt.want {
			t.Errorf("Resolve(%q) = %q, want %q", tt.p, got, tt.want)
		}
	}
}

func FuzzResolve(f *testing.F) {
	for _, s := range []string{"", "~", "~/x", "~x", "a/../..", "/a/b", "\x00", "../../../etc/shadow"} {
		f.Add(s, "/home/user", "")
	}
	f.Fuzz(func(t *testing.T, p, home, workdir string) {
		got, err := Resolve(p, home, workdir)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if !filepath.IsAbs(got) {
			t.Fatalf("Resolve(%q,%q,%q) = %q, not absolute", p, home, workdir, got)
		}
		if filepath.Clean(got) != got {
			t.Fatalf("Resolve(%q) = %q, not clean", p, got)
		}
		if strings.IndexByte(got, 0) >= 0 && strings.IndexByte(home+workdir, 0) < 0 {
			t.Fatalf("NUL leaked into %q", got)
		}
	})
}
