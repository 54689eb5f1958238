package ocireg

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Entry is one tar entry of a layer. Body is the content of a regular
// file; Header fields not set get defaults (root-owned, a fixed mtime).
type Entry struct {
	tar.Header
	Body []byte
}

// Dir, File, Symlink and Hardlink are shorthands for entries.
func Dir(name string, mode int64) Entry {
	return Entry{Header: tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode}}
}

func File(name string, mode int64, body string) Entry {
	return Entry{Header: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode}, Body: []byte(body)}
}

func Symlink(name, target string) Entry {
	return Entry{Header: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}}
}

func Hardlink(name, target string) Entry {
	return Entry{Header: tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target}}
}

// Tar returns the uncompressed tar of entries, in order.
func Tar(entries ...Entry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mt := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, e := range entries {
		h := e.Header
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.Body))
		}
		if h.ModTime.IsZero() {
			h.ModTime = mt
		}
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			return nil, fmt.Errorf("tar %s: %w", h.Name, err)
		}
		if _, err := tw.Write(e.Body); err != nil {
			return nil, fmt.Errorf("tar %s: %w", h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Gzip compresses b.
func Gzip(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Layer is a gzip-compressed OCI layer of the tar bytes.
func Layer(tarBytes []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tarBytes)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// busyboxApplets are linked to busybox in BusyboxImage.
var busyboxApplets = []string{"sh", "ash", "cat", "chmod", "chown", "cp", "dirname", "echo", "env", "find", "id",
	"ls", "mkdir", "mktemp", "mv", "pwd", "rm", "sleep", "stat", "tar", "touch", "whoami", "grep", "test", "["}

// BusyboxImage is a linux/amd64 image of a root with the static busybox
// bb as /bin/busybox, its common applets as /bin/<applet>, a /bin/bash
// that execs it (the SDKs run commands with /bin/bash -l -c) and
// /etc/os-release "ID=busybox"; its config sets PATH=/bin,
// FROM_IMAGE=yes and WORKDIR /srv.
func BusyboxImage(bb []byte) (v1.Image, error) {
	entries := []Entry{Dir("bin", 0o755), Dir("etc", 0o755), Dir("srv", 0o755), File("bin/busybox", 0o755, string(bb))}
	for _, a := range busyboxApplets {
		entries = append(entries, Symlink("bin/"+a, "busybox"))
	}
	entries = append(entries,
		File("bin/bash", 0o755, "#!/bin/busybox sh\nexec /bin/busybox sh \"$@\"\n"),
		File("etc/os-release", 0o644, "ID=busybox\n"))
	b, err := Tar(entries...)
	if err != nil {
		return nil, err
	}
	l, err := Layer(b)
	if err != nil {
		return nil, err
	}
	return Image("linux/amd64", v1.Config{Env: []string{"PATH=/bin", "FROM_IMAGE=yes"}, WorkingDir: "/srv"}, l)
}
