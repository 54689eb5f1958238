package oci_test

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/oci"
	"github.com/moatsh/moat/internal/oci/ocitest"
	"github.com/moatsh/moat/internal/testkit"
)

func requireRoot(t *testing.T) {
	t.Helper()
	testkit.RequireRoot(t) // unpacking keeps file owners
}

func busybox(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("/usr/bin/busybox")
	if err != nil {
		testkit.Missing(t, "busybox not installed (apt-get install busybox-static): %v", err)
	}
	return b
}

// testImage is two layers over a busybox root: the second deletes a file
// and a directory, makes a directory opaque and replaces a file by a
// symlink.
func testImage(t *testing.T, bb []byte) v1.Image {
	owned := ocitest.File("srv/owned", 0o640, "mine\n")
	owned.Uid, owned.Gid = 1234, 5678
	setuid := ocitest.File("bin/su-ish", 0o4755, "#!/bin/sh\n")
	fifo := ocitest.Entry{Header: tar.Header{Typeflag: tar.TypeFifo, Name: "run/fifo", Mode: 0o620}}
	dev := ocitest.Entry{Header: tar.Header{Typeflag: tar.TypeChar, Name: "dev/null", Mode: 0o666, Devmajor: 1, Devminor: 3}}
	l1 := ocitest.Tar(t,
		ocitest.Dir("bin", 0o755), ocitest.Dir("etc", 0o755), ocitest.Dir("srv", 0o711),
		ocitest.Dir("opq", 0o755), ocitest.Dir("opq/sub", 0o755), ocitest.Dir("gone", 0o755),
		ocitest.Dir("run", 0o755), ocitest.Dir("dev", 0o755),
		ocitest.File("bin/busybox", 0o755, string(bb)),
		ocitest.Symlink("bin/sh", "busybox"),
		ocitest.Hardlink("bin/busybox-hard", "bin/busybox"),
		setuid, owned, fifo, dev,
		ocitest.File("etc/os-release", 0o644, "ID=moattest\n"),
		ocitest.File("etc/remove-me", 0o644, "x\n"),
		ocitest.File("etc/motd", 0o644, "old\n"),
		ocitest.File("opq/a", 0o644, "a\n"),
		ocitest.File("opq/sub/b", 0o644, "b\n"),
		ocitest.File("gone/f", 0o644, "f\n"),
	)
	l2 := ocitest.Tar(t,
		ocitest.File("opq/c", 0o600, "c\n"),
		ocitest.File("opq/.wh..wh..opq", 0, ""),
		ocitest.File("etc/.wh.remove-me", 0, ""),
		ocitest.File(".wh.gone", 0, ""),
		ocitest.Symlink("etc/motd", "/etc/os-release"),
		ocitest.File("etc/added", 0o644, "new\n"),
	)
	cfg := v1.Config{Env: []string{"PATH=/bin", "LANG=C.UTF-8"}, WorkingDir: "/srv", User: "1234",
		Entrypoint: []string{"/bin/sh"}, Cmd: []string{"-c", "echo hi"}}
	return ocitest.Image(t, "linux/amd64", cfg, ocitest.Layer(t, l1), ocitest.Layer(t, l2))
}

func TestPullUnpack(t *testing.T) {
	requireRoot(t)
	bb := busybox(t)
	reg := ocitest.NewRegistry(t, "", "")
	arm := ocitest.Image(t, "linux/arm64", v1.Config{}, ocitest.Layer(t, ocitest.Tar(t, ocitest.File("arm", 0o644, "arm\n"))))
	reg.PushIndex(t, "moat/test:1", map[string]v1.Image{"linux/amd64": testImage(t, bb), "linux/arm64": arm})
	cache := t.TempDir()
	ctx := context.Background()

	reg.Requests.Store(0)
	start := time.Now()
	img, err := oci.Pull(ctx, reg.Ref("moat/test:1"), cache)
	if err != nil {
		t.Fatal(err)
	}
	pullTime := time.Since(start)
	firstBlobs := reg.BlobRequests.Load()
	if firstBlobs != 3 { // config + 2 layers
		t.Errorf("first pull fetched %d blobs, want 3", firstBlobs)
	}
	if len(img.Layers) != 2 || img.Platform != "linux/amd64" || !strings.HasPrefix(img.Digest, "sha256:") {
		t.Fatalf("image = %+v", img)
	}
	want := oci.Config{Env: []string{"PATH=/bin", "LANG=C.UTF-8"}, WorkingDir: "/srv", User: "1234",
		Entrypoint: []string{"/bin/sh"}, Cmd: []string{"-c", "echo hi"}}
	if fmt.Sprint(img.Config) != fmt.Sprint(want) {
		t.Errorf("config = %+v, want %+v", img.Config, want)
	}

	dir := t.TempDir()
	start = time.Now()
	st, err := oci.Unpack(ctx, img.Layers, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pull %v (%d requests), unpack %v: %+v", pullTime, reg.Requests.Load(), time.Since(start), st)
	if st.SkippedNodes != 1 || st.Whiteouts != 3 {
		t.Errorf("stats = %+v, want 1 skipped device, 3 whiteouts", st)
	}
	sum := sha256.Sum256(bb)
	wantTree := map[string]string{
		"bin":              "dir 755 0:0",
		"bin/busybox":      "file 755 0:0 sha256:" + hex.EncodeToString(sum[:8]),
		"bin/busybox-hard": "file 755 0:0 sha256:" + hex.EncodeToString(sum[:8]),
		"bin/sh":           "symlink 0:0 -> busybox",
		"bin/su-ish":       "file 4755 0:0 \"#!/bin/sh\\n\"",
		"dev":              "dir 755 0:0",
		"etc":              "dir 755 0:0",
		"etc/added":        "file 644 0:0 \"new\\n\"",
		"etc/motd":         "symlink 0:0 -> /etc/os-release",
		"etc/os-release":   "file 644 0:0 \"ID=moattest\\n\"",
		"opq":              "dir 755 0:0",
		"opq/c":            "file 600 0:0 \"c\\n\"",
		"run":              "dir 755 0:0",
		"run/fifo":         "fifo 620 0:0",
		"srv":              "dir 711 0:0",
		"srv/owned":        "file 640 1234:5678 \"mine\\n\"",
	}
	if got := snapshot(t, dir); !mapsEqual(got, wantTree) {
		t.Errorf("tree mismatch:\n%s", diffMaps(got, wantTree))
	}
	var a, b syscall.Stat_t
	_ = syscall.Lstat(filepath.Join(dir, "bin/busybox"), &a)
	_ = syscall.Lstat(filepath.Join(dir, "bin/busybox-hard"), &b)
	if a.Ino != b.Ino || a.Nlink != 2 {
		t.Errorf("hard link: inodes %d/%d, nlink %d", a.Ino, b.Ino, a.Nlink)
	}
	fi, _ := os.Lstat(filepath.Join(dir, "etc/os-release"))
	if !fi.ModTime().Equal(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Errorf("mtime = %v", fi.ModTime())
	}

	// Second pull: manifests only, every blob from the cache.
	reg.Requests.Store(0)
	reg.BlobRequests.Store(0)
	start = time.Now()
	img2, err := oci.Pull(ctx, reg.Ref("moat/test:1"), cache)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cached pull %v: %d requests, %d blob requests", time.Since(start), reg.Requests.Load(), reg.BlobRequests.Load())
	if n := reg.BlobRequests.Load(); n != 0 {
		t.Errorf("second pull fetched %d blobs, want 0", n)
	}
	if img2.Digest != img.Digest || !slices.Equal(layerPaths(img2), layerPaths(img)) {
		t.Errorf("second pull differs: %+v vs %+v", img2, img)
	}

	// The arm64 image of the same index.
	armImg, err := oci.Pull(ctx, reg.Ref("moat/test:1"), cache, oci.WithPlatform("linux/arm64"))
	if err != nil || len(armImg.Layers) != 1 {
		t.Fatalf("arm64 pull: %+v, %v", armImg, err)
	}
	_, err = oci.Pull(ctx, reg.Ref("moat/test:1"), cache, oci.WithPlatform("linux/riscv64"))
	if !errors.Is(err, oci.ErrImageNotFound) || !strings.Contains(err.Error(), "linux/arm64") {
		t.Errorf("riscv64 pull: %v, want ErrImageNotFound listing the platforms", err)
	}
}

func TestPullErrors(t *testing.T) {
	reg := ocitest.NewRegistry(t, "alice", "s3cret")
	img := ocitest.Image(t, "linux/amd64", v1.Config{}, ocitest.Layer(t, ocitest.Tar(t, ocitest.File("hello", 0o644, "hi\n"))))
	reg.PushImage(t, "private/app:v1", img)
	ctx := context.Background()
	cache := t.TempDir()

	if _, err := oci.Pull(ctx, reg.Ref("private/app:v1"), cache,
		oci.WithCredentials(oci.Credentials{Username: "alice", Password: "s3cret"})); err != nil {
		t.Fatalf("right credentials: %v", err)
	}
	tests := []struct {
		name string
		ref  string
		opts []oci.PullOpt
		kind error
	}{
		{"wrong password", reg.Ref("private/app:v1"),
			[]oci.PullOpt{oci.WithCredentials(oci.Credentials{Username: "alice", Password: "nope"})}, oci.ErrUnauthorized},
		{"no credentials", reg.Ref("private/app:v1"), nil, oci.ErrUnauthorized},
		{"missing tag", reg.Ref("private/app:v2"),
			[]oci.PullOpt{oci.WithCredentials(oci.Credentials{Username: "alice", Password: "s3cret"})}, oci.ErrImageNotFound},
		{"missing repo", reg.Ref("private/nothing:v1"),
			[]oci.PullOpt{oci.WithCredentials(oci.Credentials{Username: "alice", Password: "s3cret"})}, oci.ErrImageNotFound},
		{"bad reference", "UPPER/Case::x", nil, errdefs.ErrInvalidArgument},
		{"unreachable", "127.0.0.1:1/x:y", nil, errdefs.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := oci.Pull(ctx, tt.ref, t.TempDir(), tt.opts...)
			if !errors.Is(err, tt.kind) {
				t.Fatalf("err = %v, want %v", err, tt.kind)
			}
			t.Logf("%v", err)
		})
	}
}

func layerPaths(img *oci.Image) []string {
	var out []string
	for _, l := range img.Layers {
		out = append(out, l.Path)
	}
	return out
}

// snapshot describes every entry below dir: type, mode, owner and content
// (or a hash of it), or a symlink's target.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		own := fmt.Sprintf("%d:%d", st.Uid, st.Gid)
		perm := fmt.Sprintf("%o", st.Mode&0o7777)
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			out[rel] = "dir " + perm + " " + own
		case syscall.S_IFLNK:
			target, _ := os.Readlink(p)
			out[rel] = "symlink " + own + " -> " + target
		case syscall.S_IFIFO:
			out[rel] = "fifo " + perm + " " + own
		case syscall.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			content := fmt.Sprintf("%q", b)
			if len(b) > 64 {
				sum := sha256.Sum256(b)
				content = "sha256:" + hex.EncodeToString(sum[:8])
			}
			out[rel] = "file " + perm + " " + own + " " + content
		default:
			out[rel] = fmt.Sprintf("other %o", st.Mode)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func diffMaps(got, want map[string]string) string {
	var lines []string
	for k, v := range got {
		if want[k] != v {
			lines = append(lines, fmt.Sprintf("  %s: got %q, want %q", k, v, want[k]))
		}
	}
	for k, v := range want {
		if _, ok := got[k]; !ok {
			lines = append(lines, fmt.Sprintf("  %s: missing, want %q", k, v))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}
