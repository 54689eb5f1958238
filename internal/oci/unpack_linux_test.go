package oci_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/oci"
	"github.com/moatsh/moat/internal/oci/ocitest"
)

// layerFile writes blob to a file and returns it as a cached layer.
func layerFile(t *testing.T, blob []byte) oci.Layer {
	t.Helper()
	p := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(p, blob, 0o644); err != nil {
		t.Fatal(err)
	}
	return oci.Layer{Path: p, Size: int64(len(blob)), Digest: "sha256:test"}
}

func TestUnpackRefusesUnsafeLayers(t *testing.T) {
	requireRoot(t)
	hostPasswd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	// outside is a host directory a layer might try to reach.
	outside := t.TempDir()
	tests := []struct {
		name   string
		layers [][]ocitest.Entry
	}{
		{"dotdot", [][]ocitest.Entry{{ocitest.File("../x", 0o644, "x")}}},
		{"dotdot inside", [][]ocitest.Entry{{ocitest.Dir("a", 0o755), ocitest.File("a/../../x", 0o644, "x")}}},
		{"absolute", [][]ocitest.Entry{{ocitest.File("/x", 0o644, "x")}}},
		{"through absolute symlink", [][]ocitest.Entry{{
			ocitest.Symlink("a", "/etc"), ocitest.File("a/passwd", 0o644, "pwned\n")}}},
		{"through symlink to outside, next layer", [][]ocitest.Entry{
			{ocitest.Symlink("a", outside)},
			{ocitest.File("a/x", 0o644, "x")}}},
		{"through relative symlink", [][]ocitest.Entry{{
			ocitest.Dir("d", 0o755), ocitest.Symlink("d/up", "../.."), ocitest.File("d/up/x", 0o644, "x")}}},
		{"whiteout through symlink", [][]ocitest.Entry{{
			ocitest.Symlink("a", outside), ocitest.File("a/.wh.keep", 0, "")}}},
		{"opaque through symlink", [][]ocitest.Entry{{
			ocitest.Symlink("a", outside), ocitest.File("a/.wh..wh..opq", 0, "")}}},
		{"hardlink out", [][]ocitest.Entry{{ocitest.Hardlink("p", "../../../../etc/passwd")}}},
		{"hardlink absolute", [][]ocitest.Entry{{ocitest.Hardlink("p", "/etc/passwd")}}},
		{"hardlink through symlink", [][]ocitest.Entry{{
			ocitest.Symlink("a", "/etc"), ocitest.Hardlink("p", "a/passwd")}}},
		{"bad whiteout", [][]ocitest.Entry{{ocitest.File("etc/.wh..", 0, "")}}},
	}
	if err := os.WriteFile(filepath.Join(outside, "keep"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "rootfs")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			var layers []oci.Layer
			for _, es := range tt.layers {
				layers = append(layers, layerFile(t, ocitest.Gzip(t, ocitest.Tar(t, es...))))
			}
			_, err := oci.Unpack(context.Background(), layers, dir)
			if !errors.Is(err, oci.ErrUnsafeLayer) {
				t.Fatalf("err = %v, want ErrUnsafeLayer", err)
			}
			t.Log(err)
			if ents, _ := os.ReadDir(parent); len(ents) != 1 {
				t.Errorf("files next to the target: %v", ents)
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 1 {
				t.Errorf("files written to %s: %v", outside, ents)
			}
			if b, _ := os.ReadFile("/etc/passwd"); !bytes.Equal(b, hostPasswd) {
				t.Fatal("host /etc/passwd changed")
			}
			if _, err := os.Lstat(filepath.Join(dir, "etc/passwd")); err == nil {
				t.Error("etc/passwd written into the target through a symlink")
			}
		})
	}
}

func TestUnpackSizeCap(t *testing.T) {
	requireRoot(t)
	zeros := make([]byte, 64<<20)
	bomb := ocitest.Gzip(t, ocitest.Tar(t, ocitest.File("zeros", 0o644, string(zeros))))
	t.Logf("bomb: %d bytes compressed, %d uncompressed", len(bomb), len(zeros))
	for _, tt := range []struct {
		name string
		max  int64
	}{{"below entry", 8 << 20}, {"one byte short", 64<<20 - 1}} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			start := time.Now()
			_, err := oci.Unpack(context.Background(), []oci.Layer{layerFile(t, bomb)}, dir, oci.WithMaxSize(tt.max))
			if !errors.Is(err, oci.ErrTooLarge) {
				t.Fatalf("err = %v, want ErrTooLarge", err)
			}
			t.Logf("%v after %v", err, time.Since(start))
		})
	}
	// Trailing data after the end-of-archive marker counts too.
	tail := append(ocitest.Tar(t, ocitest.File("small", 0o644, "s")), zeros[:16<<20]...)
	_, err := oci.Unpack(context.Background(), []oci.Layer{layerFile(t, ocitest.Gzip(t, tail))}, t.TempDir(), oci.WithMaxSize(8<<20))
	if !errors.Is(err, oci.ErrTooLarge) {
		t.Fatalf("trailing bomb: err = %v, want ErrTooLarge", err)
	}
	// Within the cap it unpacks.
	dir := t.TempDir()
	if _, err := oci.Unpack(context.Background(), []oci.Layer{layerFile(t, bomb)}, dir, oci.WithMaxSize(65<<20)); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "zeros"))
	if sha256.Sum256(b) != sha256.Sum256(zeros) {
		t.Fatal("zeros differ")
	}
}

func TestUnpackReplaces(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	l1 := ocitest.Tar(t, ocitest.Dir("d", 0o755), ocitest.File("d/f", 0o644, "1"), ocitest.File("x", 0o644, "file"))
	// A file replaces a directory, a directory a file; uncompressed layer.
	l2 := ocitest.Tar(t, ocitest.File("d", 0o600, "now a file"), ocitest.Dir("x", 0o700), ocitest.File("x/y", 0o644, "y"))
	if _, err := oci.Unpack(context.Background(), []oci.Layer{layerFile(t, ocitest.Gzip(t, l1)), layerFile(t, l2)}, dir); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"d":   "file 600 0:0 \"now a file\"",
		"x":   "dir 700 0:0",
		"x/y": "file 644 0:0 \"y\"",
	}
	if got := snapshot(t, dir); !mapsEqual(got, want) {
		t.Errorf("tree mismatch:\n%s", diffMaps(got, want))
	}
}
