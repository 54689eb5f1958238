package nfsd

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/nfsd/xdr"
	"github.com/moatsh/moat/internal/testkit"
)

// testDir is a directory owned by 1000:1000 (the volumes' root owner).
func testDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chown(dir, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	return dir
}

func owner(t *testing.T, p string) (uint32, uint32) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}

func TestOwnershipAndData(t *testing.T) {
	dir := testDir(t)
	c := serve(t, dir)
	root := c.mount("/v0")
	st, fh := c.create(root, "a.txt", 0o644)
	if st != nfsOK {
		t.Fatalf("CREATE: %d", st)
	}
	if uid, gid := owner(t, filepath.Join(dir, "a.txt")); uid != 1000 || gid != 1000 {
		t.Errorf("a.txt owned by %d:%d, want 1000:1000", uid, gid)
	}
	if st := c.write(fh, 0, "hello"); st != nfsOK {
		t.Fatalf("WRITE: %d", st)
	}
	if st, got := c.read(fh); st != nfsOK || got != "hello" {
		t.Fatalf("READ: %d %q", st, got)
	}
	// Another user may not write 0644 of 1000; the owner may even at 0444
	// (a client writes the data of a file it created read-only).
	c.cred.UID, c.cred.GID = 1001, 1001
	if st := c.write(fh, 0, "x"); st != nfsErrAcces {
		t.Errorf("WRITE as 1001: %d, want ACCES", st)
	}
	if st, _ := c.create(root, "b.txt", 0o644); st != nfsErrAcces {
		t.Errorf("CREATE as 1001 in 1000's 0755 dir: %d, want ACCES", st)
	}
	c.cred.UID, c.cred.GID = 1000, 1000
	if err := os.Chmod(filepath.Join(dir, "a.txt"), 0o444); err != nil {
		t.Fatal(err)
	}
	if st := c.write(fh, 5, " world"); st != nfsOK {
		t.Errorf("owner's WRITE to 0444: %d", st)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "hello world" {
		t.Errorf("file has %q", b)
	}
	// Root of the guest is root of the volume's range.
	c.cred.UID, c.cred.GID = 0, 0
	if st, _ := c.mkdir(root, "rootdir"); st != nfsOK {
		t.Fatalf("MKDIR as 0: %d", st)
	}
	if uid, _ := owner(t, filepath.Join(dir, "rootdir")); uid != 0 {
		t.Errorf("rootdir owned by %d", uid)
	}
	// IDs the range does not map are nobody.
	c.cred.UID, c.cred.GID = 70000, 70000
	if st, _ := c.create(root, "big.txt", 0o666); st != nfsErrAcces {
		t.Errorf("CREATE as 70000: %d, want ACCES (nobody)", st)
	}
}

func TestSymlinksNeverFollowed(t *testing.T) {
	dir := testDir(t)
	c := serve(t, dir)
	root := c.mount("/v0")
	outside := t.TempDir()
	for name, target := range map[string]string{"evil": "/etc/passwd", "up": "..", "out": outside} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	st, evil, a := c.lookup(root, "evil")
	if st != nfsOK || a == nil || a.typ != 5 {
		t.Fatalf("LOOKUP evil: %d %+v (want a symlink)", st, a)
	}
	if st, _ := c.read(evil); st == nfsOK {
		t.Error("READ through a symlink succeeded")
	}
	if st := c.write(evil, 0, "x"); st == nfsOK {
		t.Error("WRITE through a symlink succeeded")
	}
	_, out, _ := c.lookup(root, "out")
	if st, _ := c.create(out, "planted", 0o644); st == nfsOK {
		t.Error("CREATE in a symlink to a host directory succeeded")
	}
	if st, _, _ := c.lookup(out, "x"); st == nfsOK {
		t.Error("LOOKUP through a symlink succeeded")
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("files appeared outside: %v", ents)
	}
	// A directory the client holds a handle of, replaced by a symlink out.
	st, d := c.mkdir(root, "d")
	if st != nfsOK {
		t.Fatal(st)
	}
	if err := os.Rename(filepath.Join(dir, "d"), filepath.Join(dir, "d.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "d")); err != nil {
		t.Fatal(err)
	}
	st, _ = c.create(d, "x", 0o644)
	if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
		t.Fatalf("CREATE in a handle whose directory became a symlink wrote outside (status %d)", st)
	}
	if st == nfsOK {
		// The handle followed the directory to its new name.
		if _, err := os.Stat(filepath.Join(dir, "d.old", "x")); err != nil {
			t.Errorf("created x, but not in d.old: %v", err)
		}
	}
	// Names with slashes or dots are refused.
	for _, name := range []string{"../x", "a/b", "..", "."} {
		if st, _ := c.create(root, name, 0o644); st == nfsOK {
			t.Errorf("CREATE %q succeeded", name)
		}
	}
	// A symlink the client makes is a symlink, its target never used.
	st, _ = c.nfs(10, func(w *xdr.Writer) { w.Opaque(root); w.String("mine"); putSattr(w, nil); w.String("/etc/shadow") })
	if target, err := os.Readlink(filepath.Join(dir, "mine")); st != nfsOK || err != nil || target != "/etc/shadow" {
		t.Errorf("SYMLINK: %d, %q %v", st, target, err)
	}
}

func TestMknodRefusesDevices(t *testing.T) {
	dir := testDir(t)
	c := serve(t, dir)
	root := c.mount("/v0")
	c.cred.UID, c.cred.GID = 0, 0
	for _, typ := range []uint32{nf3Chr, nf3Blk} {
		st, _ := c.nfs(11, func(w *xdr.Writer) {
			w.Opaque(root)
			w.String("dev")
			w.Uint32(typ)
			putSattr(w, nil)
			w.Uint32(1)
			w.Uint32(3)
		})
		if st != nfsErrPerm {
			t.Errorf("MKNOD type %d: %d, want PERM", typ, st)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "dev")); err == nil {
		t.Error("a device node exists")
	}
	st, _ := c.nfs(11, func(w *xdr.Writer) { w.Opaque(root); w.String("fifo"); w.Uint32(nf3Fifo); putSattr(w, nil) })
	if fi, err := os.Lstat(filepath.Join(dir, "fifo")); st != nfsOK || err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("MKNOD fifo: %d %v", st, err)
	}
	_, fifo, _ := c.lookup(root, "fifo")
	done := make(chan uint32, 1)
	go func() { st, _ := c.read(fifo); done <- st }()
	select {
	case st := <-done:
		if st == nfsOK {
			t.Error("READ of a FIFO succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("READ of a FIFO hangs")
	}
}

func TestHandlesSurviveRestartAndRename(t *testing.T) {
	dir := testDir(t)
	c := serve(t, dir)
	root := c.mount("/v0")
	_, d := c.mkdir(root, "d")
	_, f := c.create(d, "f", 0o644)
	c.write(f, 0, "kept")
	// A new server of the same tree knows none of the handles yet.
	c2 := serve(t, dir)
	if got := c2.mount("/v0"); string(got) != string(root) {
		t.Fatalf("root handle changed: %x vs %x", got, root)
	}
	if st, got := c2.read(f); st != nfsOK || got != "kept" {
		t.Fatalf("READ of an old handle after a restart: %d %q", st, got)
	}
	// Moved by another sharer: found again by a walk (after its rate limit).
	if err := os.Rename(filepath.Join(dir, "d"), filepath.Join(dir, "e")); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "READ of the old handle to find the file renamed by a sharer", func() bool {
		st, got := c2.read(f)
		return st == nfsOK && got == "kept"
	})
	// Removed: stale.
	if err := os.RemoveAll(filepath.Join(dir, "e")); err != nil {
		t.Fatal(err)
	}
	// Not a wait for an event: past the walks' rate limit (2 s), so that
	// the GETATTR below is answered by a new walk of the tree, not by the
	// one that just found the rename.
	time.Sleep(2100 * time.Millisecond)
	if st, _ := c2.getattr(f); st != nfsErrStale {
		t.Errorf("GETATTR of a removed file: %d, want STALE", st)
	}
	// A rename through the server keeps the handle.
	_, g := c2.create(root, "g", 0o644)
	st, _ := c2.nfs(14, func(w *xdr.Writer) { w.Opaque(root); w.String("g"); w.Opaque(root); w.String("h") })
	if st != nfsOK {
		t.Fatal(st)
	}
	if st, _ := c2.getattr(g); st != nfsOK {
		t.Errorf("GETATTR after RENAME: %d", st)
	}
}

func TestReaddirPlus(t *testing.T) {
	dir := testDir(t)
	c := serve(t, dir)
	root := c.mount("/v0")
	want := map[string]bool{}
	for i := range 300 {
		name := "file-" + strings.Repeat("x", i%50) + "-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		want[name] = true
		if st, _ := c.create(root, name, 0o644); st != nfsOK {
			t.Fatal(st)
		}
	}
	got := map[string]bool{}
	cookie := uint64(0)
	for range 100 {
		st, r := c.nfs(17, func(w *xdr.Writer) {
			w.Opaque(root)
			w.Uint64(cookie)
			w.Fixed(make([]byte, 8))
			w.Uint32(4096)
			w.Uint32(8192)
		})
		if st != nfsOK {
			t.Fatalf("READDIRPLUS: %d", st)
		}
		skipPostOp(r)
		r.Fixed(8)
		for r.Bool() {
			r.Uint64()
			name := r.String(255)
			cookie = r.Uint64()
			a := skipPostOp(r)
			if r.Bool() {
				r.Opaque(64)
			}
			if name != "." && name != ".." {
				if a == nil || a.uid != 1000 {
					t.Errorf("%s: attributes %+v", name, a)
				}
				got[name] = true
			}
		}
		if r.Bool() {
			break
		}
	}
	if len(got) != len(want) {
		t.Errorf("listed %d entries, want %d", len(got), len(want))
	}
}

func TestUnprivilegedPortRefused(t *testing.T) {
	dir := testDir(t)
	c := serve(t, dir)
	addr := c.conn.RemoteAddr().String()
	conn, err := net.Dial("tcp", addr) // an ephemeral, unprivileged port
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := conn.Read(make([]byte, 1)); err == nil || n > 0 {
		t.Errorf("the server kept a connection from an unprivileged port (%d, %v)", n, err)
	}
}

// TestPostOpProcs: ACCESS, READLINK, FSSTAT, FSINFO and PATHCONF answer
// a status, the object's attributes and their own body, and a handle of
// no export BADHANDLE with absent attributes.
func TestPostOpProcs(t *testing.T) {
	dir := testDir(t)
	if err := os.Symlink("target/x", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(filepath.Join(dir, "l"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	c := serve(t, dir)
	root := c.mount("/v0")
	_, link, _ := c.lookup(root, "l")
	bad := append([]byte(nil), root...)
	bad[0] ^= 0xff
	cases := []struct {
		name string
		proc uint32
		fh   []byte
		arg  func(w *xdr.Writer)
		body func(r *xdr.Reader) string // what it read, for the error
		want string
	}{
		{"access", 4, root, func(w *xdr.Writer) { w.Uint32(0x3f) }, func(r *xdr.Reader) string {
			return strconv.FormatUint(uint64(r.Uint32()&0x1), 10) // ACCESS3_READ granted to the owner
		}, "1"},
		{"readlink", 5, link, nil, func(r *xdr.Reader) string { return r.String(4096) }, "target/x"},
		{"fsstat", 18, root, nil, func(r *xdr.Reader) string {
			total, free := r.Uint64(), r.Uint64()
			return strconv.FormatBool(total > 0 && free <= total)
		}, "true"},
		{"fsinfo", 19, root, nil, func(r *xdr.Reader) string { return strconv.FormatUint(uint64(r.Uint32()), 10) }, strconv.Itoa(maxIO)},
		{"pathconf", 20, root, nil, func(r *xdr.Reader) string {
			r.Uint32()
			return strconv.FormatUint(uint64(r.Uint32()), 10)
		}, strconv.Itoa(maxName)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := func(fh []byte) func(w *xdr.Writer) {
				return func(w *xdr.Writer) {
					w.Opaque(fh)
					if tc.arg != nil {
						tc.arg(w)
					}
				}
			}
			st, r := c.nfs(tc.proc, args(tc.fh))
			if st != nfsOK {
				t.Fatalf("status %d", st)
			}
			if a := skipPostOp(r); a == nil || a.uid != 1000 {
				t.Fatalf("attributes %+v, want the object's", a)
			}
			if got := tc.body(r); got != tc.want || r.Err() != nil {
				t.Fatalf("body %q (%v), want %q", got, r.Err(), tc.want)
			}
			st, r = c.nfs(tc.proc, args(bad))
			if st != nfsErrBadHandle || r.Bool() {
				t.Fatalf("bad handle: status %d, want BADHANDLE and no attributes", st)
			}
		})
	}
}
