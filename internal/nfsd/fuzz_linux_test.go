package nfsd

import (
	"encoding/binary"
	"log/slog"
	"os"
	"testing"

	"github.com/moatsh/moat/internal/nfsd/export"
	"github.com/moatsh/moat/internal/nfsd/xdr"
	"github.com/moatsh/moat/internal/testkit"
)

// callRecord is a call message (without its record mark) of proc of prog
// as uid 1000 with args.
func callRecord(prog, proc uint32, args func(w *xdr.Writer)) []byte {
	w := xdr.NewWriter(128)
	w.Uint32(7)
	w.Uint32(msgCall)
	w.Uint32(rpcVersion)
	w.Uint32(prog)
	w.Uint32(3)
	w.Uint32(proc)
	cred := xdr.NewWriter(32)
	cred.Uint32(0)
	cred.String("fuzz")
	cred.Uint32(1000)
	cred.Uint32(1000)
	cred.Uint32(0)
	w.Uint32(authUnix)
	w.Opaque(cred.Bytes())
	w.Uint32(authNull)
	w.Uint32(0)
	if args != nil {
		args(w)
	}
	return w.Bytes()
}

// FuzzCall feeds whole call messages to a server of a scratch directory:
// whatever they hold, the server must answer (or refuse to parse) without
// panicking, with a well-formed record carrying the call's xid.
func FuzzCall(f *testing.F) {
	testkit.RequireRoot(f) // setfsuid
	dir := f.TempDir()
	_ = os.Chown(dir, 1000, 1000)
	root, err := os.Open(dir)
	if err != nil {
		f.Fatal(err)
	}
	ex, err := export.Open(0, "/v0", root)
	if err != nil {
		f.Fatal(err)
	}
	s, _ := New([]*export.Export{ex}, [8]byte{}, slog.New(slog.DiscardHandler))
	fh := ex.RootHandle()
	f.Add(callRecord(progNFS, 0, nil))
	f.Add(callRecord(progMount, 1, func(w *xdr.Writer) { w.String("/v0") }))
	for proc := uint32(1); proc <= 21; proc++ {
		f.Add(callRecord(progNFS, proc, func(w *xdr.Writer) { w.Opaque(fh); w.String("x"); w.Uint32(0) }))
	}
	f.Add(callRecord(progNFS, 8, func(w *xdr.Writer) { w.Opaque(fh); w.String("f"); w.Uint32(0); putSattr(w, nil) }))
	f.Add(callRecord(progNFS, 17, func(w *xdr.Writer) { w.Opaque(fh); w.Uint64(0); w.Fixed(make([]byte, 8)); w.Uint32(1); w.Uint32(1) }))
	f.Fuzz(func(t *testing.T, rec []byte) {
		c, err := parseCall(rec)
		if err != nil {
			return
		}
		reply := s.dispatch(c)
		if len(reply) < 16 || int(binary.BigEndian.Uint32(reply)&0x7fffffff) != len(reply)-4 {
			t.Fatalf("reply of %d bytes is not one framed record", len(reply))
		}
		if binary.BigEndian.Uint32(reply[4:]) != c.xid {
			t.Fatal("reply lost the xid")
		}
	})
}
