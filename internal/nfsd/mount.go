package nfsd

import (
	"github.com/moatsh/moat/internal/nfsd/xdr"
)

// The MOUNT protocol, version 3 (RFC 1813 appendix I), served on the
// same port as NFS, so a client mounting with mountport= needs no
// portmapper: MNT gives an export's root handle; the server keeps no
// mount list (DUMP is empty, UMNT and UMNTALL do nothing).

const (
	mnt3OK         = 0
	mnt3ErrNoEnt   = 2
	authUnixFlavor = 1
)

var mountProcs = [...]proc{
	0: func(*Server, *call, *xdr.Writer) bool { return true }, // NULL
	1: (*Server).mnt,
	2: func(_ *Server, _ *call, w *xdr.Writer) bool { w.Bool(false); return true },                         // DUMP: no list
	3: func(_ *Server, c *call, _ *xdr.Writer) bool { c.args.String(maxPath); return c.args.Err() == nil }, // UMNT
	4: func(*Server, *call, *xdr.Writer) bool { return true },                                              // UMNTALL
	5: (*Server).exportList,
}

func (s *Server) mnt(c *call, w *xdr.Writer) bool {
	path := c.args.String(maxPath)
	if c.args.Err() != nil {
		return false
	}
	ex := s.byName[path]
	if ex == nil {
		w.Uint32(mnt3ErrNoEnt)
		return true
	}
	w.Uint32(mnt3OK)
	w.Opaque(ex.RootHandle())
	w.Uint32(1) // auth flavors: AUTH_UNIX
	w.Uint32(authUnixFlavor)
	return true
}

// exportList answers EXPORT: every export, open to every client (only
// the sandbox's guest can reach the server).
func (s *Server) exportList(_ *call, w *xdr.Writer) bool {
	for _, ex := range s.exports {
		w.Bool(true)
		w.String(ex.Name)
		w.Bool(false) // no groups
	}
	w.Bool(false)
	return true
}
