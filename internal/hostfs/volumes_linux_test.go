package hostfs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/idmap"
	"github.com/moatsh/moat/internal/testkit"
)

// TestVolumeMountRemoveDir: a volume's idmapped copy in a sandbox dir
// shows the volume's owners shifted into the sandbox's range, RemoveDir
// refuses while it is mounted (it would delete the volume's files), and
// UnmountAll takes it away.
func TestVolumeMountRemoveDir(t *testing.T) {
	testkit.RequireRoot(t)
	vol := t.TempDir()
	if err := unix.Mount("tmpfs", vol, "tmpfs", 0, "mode=0755"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(vol, unix.MNT_DETACH)
	if err := os.WriteFile(filepath.Join(vol, "kept"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(vol, "kept"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := idmap.Range{Host: idmap.FirstHost + 7*idmap.Size}
	p, err := MountVolume(dir, 0, vol, r)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(p, "kept"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != r.Host+1000 || st.Gid != r.Host+1000 {
		t.Errorf("through the idmapped copy kept is %d:%d, want %d:%d", st.Uid, st.Gid, r.Host+1000, r.Host+1000)
	}
	if err := RemoveDir(dir); err == nil {
		t.Fatal("RemoveDir went ahead with a volume mounted")
	}
	if _, err := os.Stat(filepath.Join(vol, "kept")); err != nil {
		t.Fatalf("the volume lost its file: %v", err)
	}
	if err := UnmountAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := RemoveDir(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(vol, "kept")); err != nil {
		t.Fatalf("the volume lost its file: %v", err)
	}
}
