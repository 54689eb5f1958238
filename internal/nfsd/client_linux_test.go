package nfsd

import (
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"

	"github.com/moatsh/moat/internal/nfsd/export"
	"github.com/moatsh/moat/internal/nfsd/xdr"
	"github.com/moatsh/moat/internal/testkit"
)

// testClient speaks RPC to a test server over TCP, from a privileged
// source port as a kernel client does.
type testClient struct {
	t    *testing.T
	conn net.Conn
	mu   sync.Mutex
	xid  uint32
	cred export.Cred
}

// serve starts a server of dir as export "/v0" and returns a client of
// it as uid 1000.
func serve(t *testing.T, dir string) *testClient {
	t.Helper()
	testkit.RequireRoot(t) // setfsuid, privileged ports
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	root, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := export.Open(0, "/v0", root)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New([]*export.Export{ex}, [8]byte{1}, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done; ex.Close() })
	return dialTest(t, ln.Addr().String(), 0)
}

// dialTest connects from a privileged port (0: any free one below 1024),
// or from port when it is given.
func dialTest(t *testing.T, addr string, port int) *testClient {
	t.Helper()
	var conn net.Conn
	var err error
	for p := 700; p < 1000; p++ {
		if port != 0 {
			p = port
		}
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p}}
		if conn, err = d.Dial("tcp", addr); err == nil || port != 0 {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &testClient{t: t, conn: conn, cred: export.Cred{UID: 1000, GID: 1000}}
}

// call sends one call and returns the reader positioned after the
// accepted reply's status (which it returns as accept).
func (c *testClient) call(prog, proc uint32, args func(w *xdr.Writer)) (accept uint32, r *xdr.Reader, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.xid++
	w := xdr.NewWriter(256)
	w.Uint32(0)
	w.Uint32(c.xid)
	w.Uint32(msgCall)
	w.Uint32(rpcVersion)
	w.Uint32(prog)
	w.Uint32(3)
	w.Uint32(proc)
	cred := xdr.NewWriter(64)
	cred.Uint32(0)
	cred.String("test")
	cred.Uint32(c.cred.UID)
	cred.Uint32(c.cred.GID)
	cred.Uint32(uint32(len(c.cred.Groups)))
	for _, g := range c.cred.Groups {
		cred.Uint32(g)
	}
	w.Uint32(authUnix)
	w.Opaque(cred.Bytes())
	w.Uint32(authNull)
	w.Uint32(0)
	if args != nil {
		args(w)
	}
	b := w.Bytes()
	binary.BigEndian.PutUint32(b, 0x80000000|uint32(len(b)-4))
	if _, err := c.conn.Write(b); err != nil {
		return 0, nil, err
	}
	rec, err := readRecord(c.conn, maxRecord+1024)
	if err != nil {
		return 0, nil, err
	}
	r = xdr.NewReader(rec)
	if xid := r.Uint32(); xid != c.xid {
		c.t.Fatalf("reply xid %d, want %d", xid, c.xid)
	}
	r.Uint32() // reply
	if r.Uint32() != replyAccepted {
		return ^uint32(0), r, nil
	}
	r.Uint32()
	r.Opaque(maxAuth)
	return r.Uint32(), r, nil
}

// nfs calls NFS procedure proc and returns its nfsstat3 and the reader
// after it.
func (c *testClient) nfs(proc uint32, args func(w *xdr.Writer)) (uint32, *xdr.Reader) {
	c.t.Helper()
	acc, r, err := c.call(progNFS, proc, args)
	if err != nil || acc != acceptSuccess {
		c.t.Fatalf("nfs proc %d: accept %d, %v", proc, acc, err)
	}
	return r.Uint32(), r
}

// skipPostOp skips a post_op_attr, returning it decoded (nil: absent).
func skipPostOp(r *xdr.Reader) *fattr {
	if !r.Bool() {
		return nil
	}
	return readFattr(r)
}

// fattr is the part of fattr3 the tests look at.
type fattr struct {
	typ, mode, uid, gid uint32
	size                uint64
}

func readFattr(r *xdr.Reader) *fattr {
	a := &fattr{typ: r.Uint32(), mode: r.Uint32()}
	r.Uint32() // nlink
	a.uid, a.gid = r.Uint32(), r.Uint32()
	a.size = r.Uint64()
	r.Fixed(84 - 28)
	return a
}

func (c *testClient) mount(path string) []byte {
	c.t.Helper()
	acc, r, err := c.call(progMount, 1, func(w *xdr.Writer) { w.String(path) })
	if err != nil || acc != acceptSuccess {
		c.t.Fatalf("MNT: %d %v", acc, err)
	}
	if st := r.Uint32(); st != mnt3OK {
		c.t.Fatalf("MNT %s: status %d", path, st)
	}
	return r.Opaque(64)
}

func (c *testClient) lookup(dir []byte, name string) (uint32, []byte, *fattr) {
	st, r := c.nfs(3, func(w *xdr.Writer) { w.Opaque(dir); w.String(name) })
	if st != nfsOK {
		return st, nil, nil
	}
	fh := r.Opaque(64)
	return st, fh, skipPostOp(r)
}

// create makes a file (UNCHECKED, mode) and returns its status and handle.
func (c *testClient) create(dir []byte, name string, mode uint32) (uint32, []byte) {
	st, r := c.nfs(8, func(w *xdr.Writer) {
		w.Opaque(dir)
		w.String(name)
		w.Uint32(0)
		putSattr(w, &mode)
	})
	if st != nfsOK {
		return st, nil
	}
	if !r.Bool() {
		c.t.Fatal("CREATE returned no handle")
	}
	return st, r.Opaque(64)
}

func (c *testClient) mkdir(dir []byte, name string) (uint32, []byte) {
	mode := uint32(0o755)
	st, r := c.nfs(9, func(w *xdr.Writer) { w.Opaque(dir); w.String(name); putSattr(w, &mode) })
	if st != nfsOK {
		return st, nil
	}
	r.Bool()
	return st, r.Opaque(64)
}

// putSattr writes a sattr3 setting at most the mode.
func putSattr(w *xdr.Writer, mode *uint32) {
	w.Bool(mode != nil)
	if mode != nil {
		w.Uint32(*mode)
	}
	w.Bool(false)
	w.Bool(false)
	w.Bool(false)
	w.Uint32(0)
	w.Uint32(0)
}

func (c *testClient) write(fh []byte, off uint64, data string) uint32 {
	st, _ := c.nfs(7, func(w *xdr.Writer) {
		w.Opaque(fh)
		w.Uint64(off)
		w.Uint32(uint32(len(data)))
		w.Uint32(2)
		w.Opaque([]byte(data))
	})
	return st
}

func (c *testClient) read(fh []byte) (uint32, string) {
	st, r := c.nfs(6, func(w *xdr.Writer) { w.Opaque(fh); w.Uint64(0); w.Uint32(1 << 16) })
	if st != nfsOK {
		return st, ""
	}
	skipPostOp(r)
	r.Uint32()
	r.Bool()
	return st, string(r.Opaque(1 << 16))
}

func (c *testClient) getattr(fh []byte) (uint32, *fattr) {
	st, r := c.nfs(1, func(w *xdr.Writer) { w.Opaque(fh) })
	if st != nfsOK {
		return st, nil
	}
	return st, readFattr(r)
}
