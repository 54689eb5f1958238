package nfsd

import (
	"github.com/moatsh/moat/internal/nfsd/xdr"
)

func (s *Server) read(c *call, w *xdr.Writer) bool {
	fh, ex, ok := s.handleArg(c)
	off, count := c.args.Uint64(), c.args.Uint32()
	if !ok || c.args.Err() != nil {
		return false
	}
	if ex == nil {
		return badHandle(w, 1)
	}
	count = min(count, maxIO)
	data, eof, a, err := ex.Read(c.cred, fh, off, int(count))
	w.Uint32(status(err))
	if err != nil {
		w.Bool(false)
		return true
	}
	putPostOp(w, &a, ex.FSID())
	w.Uint32(uint32(len(data)))
	w.Bool(eof)
	w.Opaque(data)
	return true
}

func (s *Server) write(c *call, w *xdr.Writer) bool {
	fh, ex, ok := s.handleArg(c)
	off, count, stable := c.args.Uint64(), c.args.Uint32(), c.args.Uint32()
	data := c.args.Opaque(maxIO)
	if !ok || c.args.Err() != nil || stable > 2 {
		return false
	}
	if ex == nil {
		return badHandle(w, 2)
	}
	if int(count) < len(data) {
		data = data[:count]
	}
	n, committed, a, err := ex.Write(c.cred, fh, off, data, int(stable))
	w.Uint32(status(err))
	putWcc(w, a, ex.FSID())
	if err != nil {
		return true
	}
	w.Uint32(uint32(n))
	w.Uint32(uint32(committed))
	w.Fixed(s.verf[:])
	return true
}

func (s *Server) commit(c *call, w *xdr.Writer) bool {
	fh, ex, ok := s.handleArg(c)
	c.args.Uint64() // offset and count: the whole file is synced
	c.args.Uint32()
	if !ok || c.args.Err() != nil {
		return false
	}
	if ex == nil {
		return badHandle(w, 2)
	}
	a, err := ex.Commit(c.cred, fh)
	w.Uint32(status(err))
	putWcc(w, a, ex.FSID())
	if err == nil {
		w.Fixed(s.verf[:])
	}
	return true
}
