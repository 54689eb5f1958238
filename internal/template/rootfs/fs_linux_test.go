package rootfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/mountinfo"
	"github.com/moatsh/moat/internal/testkit"
)

func TestHasLowerdir(t *testing.T) {
	const table = `26 1 254:0 / / rw,relatime - ext4 /dev/vda rw
90 26 0:80 / /d/sandboxes/i1/rootfs rw,relatime - overlay overlay rw,lowerdir=/d/templates/base/rootfs,upperdir=/d/sandboxes/i1/upper,workdir=/d/sandboxes/i1/work
91 26 0:81 / /x rw - overlay overlay rw,lowerdir=/a:/d/templates/ci\040x/rootfs,upperdir=/u,workdir=/w
`
	tests := []struct {
		dir  string
		want bool
	}{
		{"/d/templates/base/rootfs", true},
		{"/d/templates/ci x/rootfs", true},
		{"/d/templates/other/rootfs", false},
		{"/d/templates/base", false},
		{"/", false},
	}
	for _, tt := range tests {
		es, err := mountinfo.Parse(strings.NewReader(table))
		if got := hasLowerdir(es, tt.dir); err != nil || got != tt.want {
			t.Errorf("hasLowerdir(%s) = %v, %v, want %v", tt.dir, got, err, tt.want)
		}
	}
}

// TestIsMountRoot: a bind mount of a tree (as the container runtime's
// idmapped view of a template is) keeps the tree in use after it was
// renamed, until the mount goes.
func TestIsMountRoot(t *testing.T) {
	testkit.RequireRoot(t) // mounts
	dir := t.TempDir()
	tree, mnt, moved := filepath.Join(dir, "rootfs"), filepath.Join(dir, "lower"), filepath.Join(dir, "old")
	for _, d := range []string{tree, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := InUseAsLowerdir(tree); ok || err != nil {
		t.Fatalf("before the mount: %v, %v", ok, err)
	}
	if err := unix.Mount(tree, mnt, "", unix.MS_BIND, ""); err != nil {
		testkit.Missing(t, "bind mount as root: %v", err)
	}
	mounted := true
	defer func() {
		if mounted {
			_ = unix.Unmount(mnt, unix.MNT_DETACH)
		}
	}()
	if err := os.Rename(tree, moved); err != nil {
		t.Fatal(err)
	}
	if ok, err := InUseAsLowerdir(moved); !ok || err != nil {
		t.Fatalf("mounted tree, renamed: %v, %v", ok, err)
	}
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	mounted = false
	if ok, err := InUseAsLowerdir(moved); ok || err != nil {
		t.Fatalf("after the unmount: %v, %v", ok, err)
	}
}
