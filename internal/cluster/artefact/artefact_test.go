package artefact

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tree makes a small root filesystem with every kind of entry a template
// has.
func tree(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "rootfs")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "usr/bin"), 0o755))
	must(os.MkdirAll(filepath.Join(dir, "home/user/.cache"), 0o700))
	must(os.WriteFile(filepath.Join(dir, "usr/bin/tool"), []byte("#!/bin/sh\necho tool\n"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "usr/bin/su"), []byte("setuid"), 0o644))
	must(unix.Chmod(filepath.Join(dir, "usr/bin/su"), 0o4755))
	must(os.WriteFile(filepath.Join(dir, "home/user/notes"), bytes.Repeat([]byte("x"), 70_000), 0o640))
	must(os.Lchown(filepath.Join(dir, "home/user/notes"), 1000, 1000))
	must(os.Lchown(filepath.Join(dir, "home/user"), 1000, 1000))
	must(os.Link(filepath.Join(dir, "usr/bin/tool"), filepath.Join(dir, "usr/bin/tool2")))
	must(os.Symlink("/usr/bin/tool", filepath.Join(dir, "usr/bin/abs")))
	must(os.Symlink("../../etc/passwd", filepath.Join(dir, "usr/bin/rel")))
	must(unix.Mkfifo(filepath.Join(dir, "home/user/fifo"), 0o600))
	must(unix.Mknod(filepath.Join(dir, "usr/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	long := filepath.Join(dir, strings.Repeat("d", 120))
	must(os.Mkdir(long, 0o755))
	must(os.WriteFile(filepath.Join(long, strings.Repeat("f", 120)), nil, 0o600))
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	must(os.Chtimes(filepath.Join(dir, "home/user/notes"), old, old))
	return dir
}

// A tree sent and received is the same tree: the receiver's own stream
// of it has the same digest, and its entries read back.
func TestRoundTrip(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (owners and device nodes)")
	}
	src := tree(t)
	var stream bytes.Buffer
	digest, err := Write(&stream, src)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := Digest(src); err != nil || again != digest {
		t.Fatalf("digest of the same tree: %s %v, first %s", again, err, digest)
	}
	dest := filepath.Join(t.TempDir(), "copy", "rootfs")
	if err := Receive(&stream, digest, dest); err != nil {
		t.Fatal(err)
	}
	if got, err := Digest(dest); err != nil || got != digest {
		t.Fatalf("digest of the received tree: %s %v, want %s", got, err, digest)
	}
	for _, c := range []struct {
		path  string
		check func(os.FileInfo) bool
	}{
		{"usr/bin/su", func(fi os.FileInfo) bool { return fi.Mode()&os.ModeSetuid != 0 }},
		{"home/user/notes", func(fi os.FileInfo) bool { return fi.Size() == 70_000 && fi.ModTime().Year() == 2020 }},
		{"usr/bin/tool2", func(fi os.FileInfo) bool { return fi.Sys().(*syscall.Stat_t).Nlink == 2 }},
		{"usr/null", func(fi os.FileInfo) bool { return fi.Mode()&os.ModeCharDevice != 0 }},
		{"home/user/fifo", func(fi os.FileInfo) bool { return fi.Mode()&os.ModeNamedPipe != 0 }},
		{"usr/bin/abs", func(fi os.FileInfo) bool { return fi.Mode()&os.ModeSymlink != 0 }},
	} {
		fi, err := os.Lstat(filepath.Join(dest, c.path))
		if err != nil || !c.check(fi) {
			t.Errorf("%s: %v %v", c.path, fi, err)
		}
	}
	if st, err := os.Stat(filepath.Join(dest, "home/user")); err != nil || st.Sys().(*syscall.Stat_t).Uid != 1000 {
		t.Errorf("home/user's owner: %v", err)
	}
}

// A stream that is not the recorded one extracts nothing.
func TestTampered(t *testing.T) {
	src := tree(t)
	var stream bytes.Buffer
	digest, err := Write(&stream, src)
	if err != nil {
		t.Fatal(err)
	}
	b := stream.Bytes()
	b[len(b)/2] ^= 1
	dest := filepath.Join(t.TempDir(), "rootfs")
	if err := Receive(bytes.NewReader(b), digest, dest); !errors.Is(err, ErrDigest) {
		t.Fatalf("tampered stream: %v, want ErrDigest", err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(dest)); len(ents) != 0 {
		t.Errorf("left after a refused stream: %v", ents)
	}
	// A tree changed on the builder's disk after its digest was recorded.
	if err := os.WriteFile(filepath.Join(src, "usr/bin/tool"), []byte("#!/bin/sh\nevil\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	stream.Reset()
	if _, err := Write(&stream, src); err != nil {
		t.Fatal(err)
	}
	if err := Receive(&stream, digest, dest); !errors.Is(err, ErrDigest) {
		t.Fatalf("changed tree: %v, want ErrDigest", err)
	}
}

// hostile is a tar stream of entries (name, type, link target).
func hostile(t testing.TB, entries ...[3]string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e[0], Typeflag: e[1][0], Linkname: e[2], Mode: 0o644}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Entries that would write outside the tree are refused even in a stream
// whose digest matches (one the recorded digest vouches for cannot have
// them, but a receiver does not rely on that).
func TestEscapes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries [][3]string
	}{
		{"parent path", [][3]string{{"../x", "0", ""}}},
		{"absolute path", [][3]string{{"/etc/x", "0", ""}}},
		{"through a symlink", [][3]string{{"a", "2", "/tmp"}, {"a/x", "0", ""}}},
		{"into a missing directory", [][3]string{{"nodir/x", "0", ""}}},
		{"hard link out", [][3]string{{"x", "1", "../../etc/passwd"}}},
		{"hard link to a symlink", [][3]string{{"l", "2", "/etc/passwd"}, {"x", "1", "l"}}},
		{"contiguous type", [][3]string{{"s", "7", ""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outside := t.TempDir()
			root := filepath.Join(outside, "root")
			if err := os.Mkdir(root, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := extract(bytes.NewReader(hostile(t, tc.entries...)), root); err == nil {
				t.Fatal("extracted")
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 1 {
				t.Errorf("written outside the tree: %v", ents)
			}
		})
	}
}

// FuzzExtract: no stream panics extract or writes outside its root.
func FuzzExtract(f *testing.F) {
	f.Add(hostile(f, [3]string{"a", "5", ""}, [3]string{"a/b", "0", ""}))
	f.Add(hostile(f, [3]string{"../x", "0", ""}))
	f.Add([]byte("not a tar stream"))
	f.Fuzz(func(t *testing.T, b []byte) {
		outside := t.TempDir()
		root := filepath.Join(outside, "root")
		if err := os.Mkdir(root, 0o700); err != nil {
			t.Fatal(err)
		}
		_ = extract(io.LimitReader(bytes.NewReader(b), 1<<20), root)
		if ents, _ := os.ReadDir(outside); len(ents) != 1 {
			t.Fatalf("written outside the tree: %v", ents)
		}
	})
}
