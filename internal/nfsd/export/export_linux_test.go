package export

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/testkit"
)

// open serves dir as export 0.
func open(t *testing.T, dir string) *Export {
	t.Helper()
	root, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	e, err := Open(0, "/v0", root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// TestExport drives the tree operations without a network: files are
// created as the caller (owner and group are its IDs), names a client
// sends are single components, a planted symlink is served as a symlink
// and never followed, handles survive a new Export over the same tree (a
// server restart) and a removed file's handle is stale.
func TestExport(t *testing.T) {
	testkit.RequireRoot(t) // setfsuid
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	e := open(t, dir)
	user := Cred{UID: 1000, GID: 1000}
	root := e.RootHandle()

	c, err := e.Create(user, root, "a", Guarded, SetAttr{}, [8]byte{})
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "a"), &st); err != nil || st.Uid != 1000 || st.Gid != 1000 {
		t.Fatalf("created file: uid %d gid %d, %v; want 1000", st.Uid, st.Gid, err)
	}
	if _, err := e.Create(user, root, "a", Guarded, SetAttr{}, [8]byte{}); !errors.Is(err, unix.EEXIST) {
		t.Fatalf("a guarded create of an existing name: %v, want EEXIST", err)
	}
	if n, _, _, err := e.Write(user, c.FH, 0, []byte("hello"), FileSync); err != nil || n != 5 {
		t.Fatalf("write: %d, %v", n, err)
	}
	if data, eof, _, err := e.Read(user, c.FH, 0, 100); err != nil || string(data) != "hello" || !eof {
		t.Fatalf("read: %q %v %v", data, eof, err)
	}

	for _, name := range []string{"", ".", "..", "a/b", "x\x00y", "../etc"} {
		if _, err := e.Mkdir(user, root, name, SetAttr{}); err == nil {
			t.Errorf("mkdir %q succeeded", name)
		}
	}
	// Mknod makes FIFOs and sockets only (the protocol refuses devices
	// before it: ErrDevice).
	if _, err := e.Mknod(user, root, "fifo", true, SetAttr{}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lstat(filepath.Join(dir, "fifo"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO || st.Uid != 1000 {
		t.Fatalf("mknod: mode %o uid %d, %v; want a FIFO of 1000", st.Mode, st.Uid, err)
	}

	// A symlink out of the tree, planted by anyone sharing it.
	if err := os.Symlink("/etc", filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	fh, obj, _, err := e.Lookup(user, root, "out")
	if err != nil || obj.Mode&unix.S_IFMT != unix.S_IFLNK {
		t.Fatalf("lookup of a planted symlink: mode %o, %v; want the symlink itself", obj.Mode, err)
	}
	if target, _, err := e.Readlink(user, fh); err != nil || target != "/etc" {
		t.Fatalf("readlink: %q, %v", target, err)
	}
	if _, _, _, err := e.Lookup(user, fh, "passwd"); err == nil {
		t.Fatal("a lookup through the symlink reached /etc/passwd")
	}
	if _, err := e.Create(user, fh, "x", Unchecked, SetAttr{}, [8]byte{}); err == nil {
		t.Fatal("a create through the symlink succeeded")
	}

	// A server restart: a new Export over the same tree knows the handle.
	again := open(t, dir)
	if a, err := again.Getattr(user, c.FH); err != nil || a.Size != 5 {
		t.Fatalf("getattr after a restart: %+v, %v", a, err)
	}
	if _, err := again.Remove(user, root, "a", false); err != nil {
		t.Fatal(err)
	}
	if _, err := again.Getattr(user, c.FH); !errors.Is(err, unix.ESTALE) {
		t.Fatalf("getattr of a removed file: %v, want ESTALE", err)
	}
	if _, err := again.Getattr(user, []byte("not a handle")); err == nil {
		t.Fatal("getattr of a malformed handle succeeded")
	}
}

// TestExportPermissions: the host kernel checks the caller's IDs: a user
// cannot write into a directory of another user's that is not writable to
// it, and IDs past the namespace's map are nobody.
func TestExportPermissions(t *testing.T) {
	testkit.RequireRoot(t)
	dir := t.TempDir()
	e := open(t, dir)
	root := e.RootHandle()
	owner, other := Cred{UID: 1000, GID: 1000}, Cred{UID: 1001, GID: 1001}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	d, err := e.Mkdir(owner, root, "private", SetAttr{Mode: ptr(uint32(0o700))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Create(other, d.FH, "x", Unchecked, SetAttr{}, [8]byte{}); !errors.Is(err, unix.EACCES) {
		t.Fatalf("another user's create in a 0700 directory: %v, want EACCES", err)
	}
	if _, err := e.Create(owner, d.FH, "x", Unchecked, SetAttr{}, [8]byte{}); err != nil {
		t.Fatalf("the owner's create: %v", err)
	}
	c, err := e.Create(Cred{UID: 1 << 20, GID: 1 << 20}, root, "big", Unchecked, SetAttr{}, [8]byte{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Obj == nil || c.Obj.UID != Nobody || c.Obj.GID != Nobody {
		t.Fatalf("a caller past the ID map created %+v, want nobody's", c.Obj)
	}
}

func ptr[T any](v T) *T { return &v }
