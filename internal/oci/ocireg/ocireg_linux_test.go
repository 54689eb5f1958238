package ocireg_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/moatsh/moat/internal/oci"
	"github.com/moatsh/moat/internal/oci/ocireg"
	"github.com/moatsh/moat/internal/testkit"
)

// TestRootfsImageRoundTrip pushes a directory as an image to a registry
// that wants credentials, pulls and unpacks it, and finds the same tree.
func TestRootfsImageRoundTrip(t *testing.T) {
	testkit.RequireRoot(t) // the tree has files of other owners
	src := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "etc/apt"), 0o755))
	must(os.WriteFile(filepath.Join(src, "etc/os-release"), []byte("ID=debian\n"), 0o644))
	must(os.WriteFile(filepath.Join(src, "etc/apt/secret"), []byte("s"), 0o600))
	must(os.Chown(filepath.Join(src, "etc/apt/secret"), 100, 101))
	must(os.Link(filepath.Join(src, "etc/os-release"), filepath.Join(src, "etc/os-release.hard")))
	must(os.Symlink("os-release", filepath.Join(src, "etc/link")))
	must(syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644))

	reg, err := ocireg.Start("u", "p")
	must(err)
	defer reg.Close()
	img, cleanup, err := ocireg.RootfsImage(src, t.TempDir(), v1.Config{Env: []string{"A=1"}})
	must(err)
	defer cleanup()
	must(reg.Push("test/dir:1", img))

	ctx := context.Background()
	if _, err := oci.Pull(ctx, reg.Ref("test/dir:1"), t.TempDir()); !errors.Is(err, oci.ErrUnauthorized) {
		t.Fatalf("anonymous pull: %v", err)
	}
	pulled, err := oci.Pull(ctx, reg.Ref("test/dir:1"), t.TempDir(), oci.WithCredentials(oci.Credentials{Username: "u", Password: "p"}))
	must(err)
	if len(pulled.Config.Env) != 1 || pulled.Config.Env[0] != "A=1" || len(pulled.Layers) != 1 {
		t.Fatalf("image = %+v", pulled)
	}
	dst := t.TempDir()
	_, err = oci.Unpack(ctx, pulled.Layers, dst)
	must(err)
	if b, _ := os.ReadFile(filepath.Join(dst, "etc/os-release")); string(b) != "ID=debian\n" {
		t.Fatalf("os-release = %q", b)
	}
	var st, hard syscall.Stat_t
	must(syscall.Stat(filepath.Join(dst, "etc/apt/secret"), &st))
	if st.Uid != 100 || st.Gid != 101 || st.Mode&0o777 != 0o600 {
		t.Fatalf("secret: uid %d gid %d mode %o", st.Uid, st.Gid, st.Mode&0o777)
	}
	must(syscall.Stat(filepath.Join(dst, "etc/os-release"), &st))
	must(syscall.Stat(filepath.Join(dst, "etc/os-release.hard"), &hard))
	if st.Ino != hard.Ino {
		t.Fatal("hard link not kept")
	}
	if target, err := os.Readlink(filepath.Join(dst, "etc/link")); err != nil || target != "os-release" {
		t.Fatalf("link = %q, %v", target, err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "fifo")); !os.IsNotExist(err) {
		t.Fatalf("fifo unpacked: %v", err)
	}
}
