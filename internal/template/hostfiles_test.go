package template

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"github.com/moatsh/moat/internal/template/catalog"
	"github.com/moatsh/moat/internal/template/progress"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type tarEntry struct {
	name string
	mode int64
	body string
	dir  bool
}

func writeTgz(t *testing.T, path string, entries []tarEntry) {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.body)), Typeflag: tar.TypeReg}
		if e.dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if !e.dir {
			if _, err := io.WriteString(tw, e.body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

var denoLikeTarball = []tarEntry{
	{name: "package/", dir: true},
	{name: "package/package.json", mode: 0o644, body: `{"name":"@deno/linux-x64-glibc"}`},
	{name: "package/README.md", mode: 0o644, body: "deno"},
	{name: "package/deno.d.ts", mode: 0o644, body: "not it"},
	{name: "package/deno", mode: 0o755, body: "\x7fELF fake deno"},
}

func TestExtractNPMMember(t *testing.T) {
	dir := t.TempDir()
	tgz := filepath.Join(dir, "p.tgz")
	writeTgz(t, tgz, denoLikeTarball)

	dst := filepath.Join(dir, "out", "deno")
	if err := extractNPMMember(tgz, "", "deno", dst); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "\x7fELF fake deno" {
		t.Errorf("extracted %q", b)
	}
	if err := extractNPMMember(tgz, "README.md", "deno", filepath.Join(dir, "readme")); err != nil {
		t.Fatal(err)
	}
	err := extractNPMMember(tgz, "", "node", filepath.Join(dir, "node"))
	if err == nil || !strings.Contains(err.Error(), `executable named "node"`) || !strings.Contains(err.Error(), "package.json") {
		t.Errorf("missing member: err = %v", err)
	}
	// A non-executable file of the right name is not taken.
	writeTgz(t, tgz, []tarEntry{{name: "package/deno", mode: 0o644, body: "x"}})
	if err := extractNPMMember(tgz, "", "deno", filepath.Join(dir, "d2")); err == nil {
		t.Error("took a non-executable file")
	}
}

// fakeNPM installs a stand-in npm that "packs" tgz into --pack-destination
// and counts its calls in a file.
func fakeNPM(t *testing.T, tgz string) (calls func() int) {
	t.Helper()
	dir := t.TempDir()
	count := filepath.Join(dir, "calls")
	script := filepath.Join(dir, "npm")
	body := `#!/bin/sh
echo x >> '` + count + `'
[ "$1" = pack ] || exit 2
while [ $# -gt 0 ]; do
	if [ "$1" = --pack-destination ]; then cp '` + tgz + `' "$2/pkg-1.0.0.tgz"; echo pkg-1.0.0.tgz; exit 0; fi
	shift
done
exit 3
`
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	old := npmCommand
	npmCommand = script
	t.Cleanup(func() { npmCommand = old })
	return func() int {
		b, _ := os.ReadFile(count)
		return strings.Count(string(b), "x")
	}
}

func TestFetchAndInstallHostFiles(t *testing.T) {
	tgz := filepath.Join(t.TempDir(), "deno.tgz")
	writeTgz(t, tgz, denoLikeTarball)
	calls := fakeNPM(t, tgz)
	lay := Layout{DataDir: t.TempDir()}
	def, _ := catalog.Lookup("code-interpreter-v1")
	prog := progress.New(io.Discard, "test")
	defer prog.Close(nil)

	paths, err := fetchHostFiles(context.Background(), def, lay, prog)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(lay.DataDir, "cache", "npm", "deno+linux-x64-glibc@"+catalog.DenoVersion, "files", "deno")
	if len(paths) != 1 || paths[0] != want {
		t.Fatalf("paths = %v, want [%s]", paths, want)
	}
	if _, err := fetchHostFiles(context.Background(), def, lay, prog); err != nil {
		t.Fatal(err)
	}
	if n := calls(); n != 1 {
		t.Errorf("npm ran %d times, want 1 (second fetch from the cache)", n)
	}
	if left, _ := filepath.Glob(filepath.Join(lay.DataDir, "cache", "npm", ".fetch-*")); len(left) > 0 {
		t.Errorf("temporary fetch dirs left: %v", left)
	}

	rootfs := t.TempDir()
	if err := installHostFiles(rootfs, def, paths); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(rootfs, "usr/local/bin/deno"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("deno mode %v, want 0755", fi.Mode())
	}
}

func TestFetchHostFilesNPMFailure(t *testing.T) {
	old := npmCommand
	npmCommand = "/bin/false"
	t.Cleanup(func() { npmCommand = old })
	def, _ := catalog.Lookup("code-interpreter-v1")
	prog := progress.New(io.Discard, "test")
	defer prog.Close(nil)
	_, err := fetchHostFiles(context.Background(), def, Layout{DataDir: t.TempDir()}, prog)
	if err == nil || !strings.Contains(err.Error(), "npm pack") {
		t.Fatalf("err = %v, want an npm pack error", err)
	}
}
