package template

import (
	"bytes"
	"context"
	"errors"
	"github.com/moatsh/moat/internal/template/catalog"
	"github.com/moatsh/moat/internal/template/rootfs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/testkit"
)

const fakeMmdebstrap = `#!/bin/sh
echo "I: fake mmdebstrap"
echo called >> "$FAKE_COUNT"
if [ -n "$FAKE_FAIL" ]; then echo "E: boom" >&2; exit 3; fi
n=$#; i=0
for a in "$@"; do i=$((i+1)); [ $i -eq $((n-1)) ] && target=$a; done
mkdir -p "$target/etc" "$target/home"
echo fake > "$target/etc/os-release"
`

// testEnv returns build options using a fake mmdebstrap and a copy of the
// test binary as envd, and the file counting mmdebstrap runs.
func testEnv(t *testing.T) (Options, string) {
	t.Helper()
	testkit.RequireRoot(t) // rootfs.Finalize chowns /home/user
	dir := t.TempDir()
	fake := filepath.Join(dir, "mmdebstrap")
	if err := os.WriteFile(fake, []byte(fakeMmdebstrap), 0o755); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	envd := filepath.Join(dir, "envd")
	if err := os.WriteFile(envd, b, 0o755); err != nil {
		t.Fatal(err)
	}
	count := filepath.Join(dir, "count")
	t.Setenv("FAKE_COUNT", count)
	return Options{DataDir: filepath.Join(dir, "data"), EnvdPath: envd, Mmdebstrap: fake, Out: &bytes.Buffer{}}, count
}

func runs(t *testing.T, count string) int {
	b, _ := os.ReadFile(count)
	return strings.Count(string(b), "called")
}

func TestBuildCaching(t *testing.T) {
	opts, count := testEnv(t)
	ctx := context.Background()
	def, _ := catalog.Lookup("base")
	lay := Layout{DataDir: opts.DataDir}

	first, err := Build(ctx, def, opts)
	if err != nil {
		t.Fatal(err)
	}
	if first.Cached || runs(t, count) != 1 {
		t.Fatalf("first build: cached=%v runs=%d", first.Cached, runs(t, count))
	}
	checkRootfs(t, lay.RootfsDir("base"), opts.EnvdPath)

	tests := []struct {
		name         string
		prepare      func(*catalog.Definition, *Options)
		wantRuns     int
		wantCached   bool
		wantEnvd     bool
		wantNewBuild bool
	}{
		{"unchanged", func(*catalog.Definition, *Options) {}, 1, true, false, false},
		{"envd changed", func(_ *catalog.Definition, o *Options) {
			f, _ := os.OpenFile(o.EnvdPath, os.O_APPEND|os.O_WRONLY, 0)
			f.Write([]byte("x"))
			f.Close()
		}, 1, true, true, true},
		{"definition changed", func(d *catalog.Definition, _ *Options) { d.Packages = append(d.Packages, "vim") }, 2, false, false, true},
		{"forced", func(d *catalog.Definition, o *Options) { d.Packages = append(d.Packages, "vim"); o.Force = true }, 3, false, false, true},
	}
	prev := first.BuildID
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, o := def, opts
			d.Packages = append([]string(nil), def.Packages...)
			tt.prepare(&d, &o)
			res, err := Build(ctx, d, o)
			if err != nil {
				t.Fatal(err)
			}
			if runs(t, count) != tt.wantRuns || res.Cached != tt.wantCached || res.EnvdUpdated != tt.wantEnvd {
				t.Fatalf("runs=%d cached=%v envdUpdated=%v, want %d %v %v",
					runs(t, count), res.Cached, res.EnvdUpdated, tt.wantRuns, tt.wantCached, tt.wantEnvd)
			}
			if (res.BuildID != prev) != tt.wantNewBuild {
				t.Fatalf("build ID changed = %v, want %v", res.BuildID != prev, tt.wantNewBuild)
			}
			prev = res.BuildID
			checkRootfs(t, lay.RootfsDir("base"), o.EnvdPath)
			if left, _ := filepath.Glob(filepath.Join(lay.TemplateDir("base"), buildDirPattern)); len(left) > 0 {
				t.Fatalf("work dirs left behind: %v", left)
			}
		})
	}
}

func TestBuildFailureKeepsOldRootfs(t *testing.T) {
	opts, _ := testEnv(t)
	ctx := context.Background()
	def, _ := catalog.Lookup("base")
	if _, err := Build(ctx, def, opts); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKE_FAIL", "1")
	opts.Force = true
	_, err := Build(ctx, def, opts)
	if err == nil || !strings.Contains(err.Error(), "E: boom") {
		t.Fatalf("Build() = %v, want failure quoting the tool's output", err)
	}
	lay := Layout{DataDir: opts.DataDir}
	checkRootfs(t, lay.RootfsDir("base"), opts.EnvdPath)
	if _, ok := readStamp(lay.StampPath("base")); !ok {
		t.Fatal("stamp of the intact old rootfs was removed")
	}
	if left, _ := filepath.Glob(filepath.Join(lay.TemplateDir("base"), buildDirPattern)); len(left) > 0 {
		t.Fatalf("work dirs left behind: %v", left)
	}
}

func checkRootfs(t *testing.T, dir, envd string) {
	t.Helper()
	want, _ := rootfs.FileSHA256(envd)
	got, _ := rootfs.FileSHA256(filepath.Join(dir, rootfs.EnvdPathInRootfs))
	if got != want {
		t.Fatalf("envd in rootfs differs from %s", envd)
	}
	fi, err := os.Stat(filepath.Join(dir, rootfs.EnvdPathInRootfs))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("envd mode: %v %v", fi, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "etc/hostname")); err != nil || string(b) != rootfs.SandboxHostname+"\n" {
		t.Fatalf("etc/hostname = %q, %v", b, err)
	}
}

func TestFinalizeDoesNotFollowSymlinks(t *testing.T) {
	opts, _ := testEnv(t)
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "host-resolv.conf")
	os.WriteFile(outside, []byte("host"), 0o644)
	os.MkdirAll(filepath.Join(dir, "etc"), 0o755)
	if err := os.Symlink(outside, filepath.Join(dir, "etc/resolv.conf")); err != nil {
		t.Fatal(err)
	}
	if err := rootfs.Finalize(dir, opts.EnvdPath); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "host" {
		t.Fatalf("Finalize wrote through a symlink to the host: %q", b)
	}
}

func TestFindEnvd(t *testing.T) {
	dir := t.TempDir()
	envd := filepath.Join(dir, "envd")
	os.WriteFile(envd, []byte("x"), 0o755)
	tests := []struct {
		name, flag, env string
		want            string
		wantErr         bool
	}{
		{"flag", envd, "", envd, false},
		{"the environment is the caller's (cmd/moat)", "", envd, "", true},
		{"missing flag file", filepath.Join(dir, "nope"), "", "", true},
		{"directory", dir, "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvdEnv, tt.env)
			got, err := FindEnvd(tt.flag)
			if tt.wantErr {
				if !errors.Is(err, ErrEnvdNotFound) || !strings.Contains(err.Error(), "make build") {
					t.Fatalf("FindEnvd() err = %v, want ErrEnvdNotFound with a hint", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("FindEnvd() = %q, %v, want %q", got, err, tt.want)
			}
		})
	}
}

type fakeRegistrar struct{ got store.Template }

func (f *fakeRegistrar) UpsertTemplate(_ context.Context, t store.Template) error {
	f.got = t
	return nil
}

func TestRegister(t *testing.T) {
	def, _ := catalog.Lookup("base")
	var reg fakeRegistrar
	res := Result{Name: "base", BuildID: "b1", RootfsDir: "/d/templates/base/rootfs"}
	if err := Register(context.Background(), &reg, def, res); err != nil {
		t.Fatal(err)
	}
	want := store.Template{ID: "base", Name: "base", BuildID: "b1", RootfsDir: res.RootfsDir,
		CPUCount: 2, MemoryMB: 512, DiskSizeMB: 2048, EnvdVersion: "0.6.13"}
	if reg.got != want {
		t.Fatalf("registered %+v, want %+v", reg.got, want)
	}
}
