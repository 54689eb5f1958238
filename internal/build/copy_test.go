package build

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestCopyScriptQuoting checks the COPY script's quoting and that sh
// parses it (sh -n: nothing runs).
func TestCopyScriptQuoting(t *testing.T) {
	for _, c := range []*CopyStep{
		{Src: "app", Dest: "/srv/app", Hash: strings.Repeat("a", 64)},
		{Src: "src/*.py", Dest: "rel dir/", Mode: 0o644, Hash: strings.Repeat("b", 64)},
		{Src: "it's $(rm -rf /)", Dest: "/x'; rm -rf /; '", Mode: 0o4755, Hash: strings.Repeat("c", 64)},
	} {
		s := copyScript(c, c.Dest, "user", "/a.tar", true)
		if out, err := exec.Command("sh", "-n", "-c", s).CombinedOutput(); err != nil {
			t.Fatalf("sh -n: %v %s\n%s", err, out, s)
		}
		if strings.Contains(s, "$(rm") && !strings.Contains(s, `'it'\''s $(rm -rf /)'`) {
			t.Fatalf("command substitution not quoted:\n%s", s)
		}
	}
	if got := shq("it's"); got != `'it'\''s'` {
		t.Fatalf("shq = %s", got)
	}
}

func TestCopySource(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"app", "app"},
		{"app/", "app"},
		{"./app", "app"},
		{"a/b/c.txt", "a/b/c.txt"},
		{"src/*.py", "src"},
		{"src/**/*.py", "src"},
		{"*.txt", "."},
		{"a/{x,y}/z", "a"},
		{`a/\*b`, `a/\*b`},
		{".", "."},
	} {
		if got := copySource(c.src); got != c.want {
			t.Errorf("copySource(%q) = %q, want %q", c.src, got, c.want)
		}
	}
}

// entry is one archive member: a file (body), a directory (dir) or a
// symlink (link).
type entry struct {
	name, body, link string
	dir              bool
}

// TestCopyScriptPlacesLikeE2B runs the COPY script on the host (in a
// temporary tree, owned by the current user) for each case of E2B's copy
// script: a file, a directory with and without a trailing slash, a file
// into dir/, a glob, a symlink, an existing destination.
func TestCopyScriptPlacesLikeE2B(t *testing.T) {
	app := []entry{{name: "app", dir: true}, {name: "app/main.py", body: "main"}, {name: "app/lib", dir: true}, {name: "app/lib/util.py", body: "util"}}
	hello := []entry{{name: "hello.txt", body: "hi"}}
	for _, c := range []struct {
		name      string
		src, dest string
		mode      fs.FileMode
		files     []entry
		before    []entry // already in the tree
		want      []string
		wantErr   string
	}{
		{name: "directory: its contents", src: "app", dest: "T/app", files: app,
			want: []string{"T/app/", "T/app/lib/", "T/app/lib/util.py=util", "T/app/main.py=main"}},
		{name: "directory into dir/: its contents, not dir/app", src: "app", dest: "T/app/", files: app,
			want: []string{"T/app/", "T/app/lib/", "T/app/lib/util.py=util", "T/app/main.py=main"}},
		{name: "directory merges into an existing one", src: "app", dest: "T/app", files: app,
			before: []entry{{name: "T/app/lib", dir: true}, {name: "T/app/lib/util.py", body: "old"}, {name: "T/app/keep", body: "kept"}},
			want:   []string{"T/app/", "T/app/keep=kept", "T/app/lib/", "T/app/lib/util.py=util", "T/app/main.py=main"}},
		{name: "directory through a directory symlink at the destination", src: "sys", dest: "T",
			files:  []entry{{name: "sys/lib", dir: true}, {name: "sys/lib/x.so", body: "so"}},
			before: []entry{{name: "T/usr/lib", dir: true}, {name: "T/lib", link: "usr/lib"}},
			want:   []string{"T/lib->usr/lib", "T/usr/", "T/usr/lib/", "T/usr/lib/x.so=so"}},
		{name: "file: renamed to dest", src: "hello.txt", dest: "T/x/greeting", files: hello,
			want: []string{"T/x/", "T/x/greeting=hi"}},
		{name: "file into dir/", src: "hello.txt", dest: "T/etc/greet/", files: hello,
			want: []string{"T/etc/", "T/etc/greet/", "T/etc/greet/hello.txt=hi"}},
		{name: "file into an existing directory", src: "hello.txt", dest: "T/d", files: hello,
			before: []entry{{name: "T/d", dir: true}},
			want:   []string{"T/d/", "T/d/hello.txt=hi"}},
		{name: "file replaces a file", src: "hello.txt", dest: "T/h", files: hello,
			before: []entry{{name: "T/h", body: "old"}},
			want:   []string{"T/h=hi"}},
		{name: "file with a mode", src: "hello.txt", dest: "T/h", mode: 0o600, files: hello,
			want: []string{"T/h=hi 600"}},
		{name: "directory with a mode: files get it, directories stay searchable", src: "app", dest: "T/a", mode: 0o600, files: app,
			want: []string{"T/a/", "T/a/lib/", "T/a/lib/util.py=util 600", "T/a/main.py=main 600"}},
		{name: "glob in a directory: the matches into dest", src: "src/*.py", dest: "T/py",
			files: []entry{{name: "src/a.py", body: "a"}, {name: "src/b.py", body: "b"}},
			want:  []string{"T/py/", "T/py/a.py=a", "T/py/b.py=b"}},
		{name: "glob at the top", src: "*.txt", dest: "T/txt/",
			files: []entry{{name: "a.txt", body: "a"}, {name: "b.txt", body: "b"}},
			want:  []string{"T/txt/", "T/txt/a.txt=a", "T/txt/b.txt=b"}},
		{name: "symlink: copied, not followed", src: "link", dest: "T/l",
			files: []entry{{name: "link", link: "/etc/hostname"}},
			want:  []string{"T/l->/etc/hostname"}},
		{name: "symlink into dir/", src: "link", dest: "T/d/",
			files: []entry{{name: "link", link: "target"}},
			want:  []string{"T/d/", "T/d/link->target"}},
		{name: "relative dest: from the workdir", src: "hello.txt", dest: "rel/", files: hello,
			want: []string{"T/rel/", "T/rel/hello.txt=hi"}},
		{name: "missing source", src: "nope", dest: "T/x", files: hello, wantErr: "source path does not exist"},
		{name: "file over a directory", src: "hello.txt", dest: "T/d/", files: hello,
			before: []entry{{name: "T/d/hello.txt", dir: true}}, wantErr: "cannot overwrite the directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			archive := filepath.Join(t.TempDir(), "files.tar.gz")
			writeArchive(t, archive, c.files)
			for _, e := range c.before {
				makeEntry(t, root, e)
			}
			owner, err := user.Current()
			if err != nil {
				t.Fatal(err)
			}
			// "T/…" is under root (Join drops a trailing "/": put it
			// back); anything else is relative to the workdir root/T.
			dest, workdir := c.dest, filepath.Join(root, "T")
			if strings.HasPrefix(dest, "T") {
				dest = filepath.Join(root, dest)
				if strings.HasSuffix(c.dest, "/") {
					dest += "/"
				}
				workdir = root
			} else if err := os.MkdirAll(workdir, 0o755); err != nil {
				t.Fatal(err)
			}
			s := copyScript(&CopyStep{Src: c.src, Dest: dest, Mode: c.mode}, dest, owner.Username, archive, true)
			cmd := exec.Command("sh", "-c", s)
			cmd.Dir = workdir
			out, err := cmd.CombinedOutput()
			if c.wantErr != "" {
				if err == nil || !strings.Contains(string(out), c.wantErr) {
					t.Fatalf("want an error with %q, got %v: %s", c.wantErr, err, out)
				}
				return
			}
			if err != nil {
				t.Fatalf("script: %v\n%s", err, out)
			}
			if got := listTree(t, filepath.Join(root, "T")); strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Fatalf("tree:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
		})
	}
}

func writeArchive(t *testing.T, name string, entries []entry) {
	t.Helper()
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body)), Typeflag: tar.TypeReg}
		switch {
		case e.dir:
			h.Typeflag, h.Mode, h.Size = tar.TypeDir, 0o755, 0
		case e.link != "":
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, e.link, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
}

func makeEntry(t *testing.T, root string, e entry) {
	t.Helper()
	p := filepath.Join(root, e.name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	var err error
	switch {
	case e.dir:
		err = os.MkdirAll(p, 0o755)
	case e.link != "":
		err = os.Symlink(e.link, p)
	default:
		err = os.WriteFile(p, []byte(e.body), 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// listTree lists root's tree (root named "T"): "dir/", "file=body" (with " mode" unless
// 644) and "link->target", sorted.
func listTree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = "T/" + rel
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out = append(out, rel+"->"+target)
		case info.IsDir():
			if info.Mode().Perm()&0o100 == 0 {
				t.Errorf("directory %s is not searchable (%v)", rel, info.Mode())
			}
			out = append(out, rel+"/")
		default:
			b, _ := os.ReadFile(p)
			s := rel + "=" + string(b)
			if m := info.Mode().Perm(); m != 0o644 {
				s += fmt.Sprintf(" %o", m)
			}
			out = append(out, s)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}
