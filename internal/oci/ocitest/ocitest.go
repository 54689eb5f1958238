// Package ocitest runs a real OCI registry in-process and builds images
// from tar entries for tests of image pulls: package ocireg's functions,
// failing the test on error and stopped at its end.
package ocitest

import (
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/moatsh/moat/internal/oci/ocireg"
)

// Registry is a registry served on 127.0.0.1 for one test.
type Registry struct {
	*ocireg.Registry
}

// NewRegistry starts a registry; with user set, it requires HTTP basic
// authentication with user and pass, as Docker's distribution does.
func NewRegistry(t testing.TB, user, pass string) *Registry {
	t.Helper()
	r, err := ocireg.Start(user, pass)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return &Registry{r}
}

// PushImage pushes img as repoTag.
func (r *Registry) PushImage(t testing.TB, repoTag string, img v1.Image) {
	t.Helper()
	if err := r.Push(repoTag, img); err != nil {
		t.Fatal(err)
	}
}

// PushIndex pushes an index of the images keyed by "os/arch" as repoTag.
func (r *Registry) PushIndex(t testing.TB, repoTag string, imgs map[string]v1.Image) {
	t.Helper()
	if err := r.Registry.PushIndex(repoTag, imgs); err != nil {
		t.Fatal(err)
	}
}

// Entry is one tar entry of a test layer (see ocireg.Entry).
type Entry = ocireg.Entry

// Dir, File, Symlink and Hardlink are shorthands for entries.
var (
	Dir      = ocireg.Dir
	File     = ocireg.File
	Symlink  = ocireg.Symlink
	Hardlink = ocireg.Hardlink
)

// Tar returns the uncompressed tar of entries, in order.
func Tar(t testing.TB, entries ...Entry) []byte {
	t.Helper()
	b, err := ocireg.Tar(entries...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Gzip compresses b.
func Gzip(t testing.TB, b []byte) []byte {
	t.Helper()
	z, err := ocireg.Gzip(b)
	if err != nil {
		t.Fatal(err)
	}
	return z
}

// Layer is a gzip-compressed layer of the tar bytes.
func Layer(t testing.TB, tarBytes []byte) v1.Layer {
	t.Helper()
	l, err := ocireg.Layer(tarBytes)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Image stacks layers (bottom first) with config cfg for platform
// "os/arch".
func Image(t testing.TB, platform string, cfg v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := ocireg.Image(platform, cfg, layers...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}
