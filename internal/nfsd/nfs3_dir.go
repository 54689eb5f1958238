package nfsd

import (
	"github.com/moatsh/moat/internal/nfsd/export"
	"github.com/moatsh/moat/internal/nfsd/xdr"
)

// dirArg decodes diropargs3 and finds the directory's export (nil: a
// malformed handle).
func (s *Server) dirArg(c *call) ([]byte, string, *export.Export, bool) {
	fh, name := getDirOp(c.args)
	if c.args.Err() != nil {
		return nil, "", nil, false
	}
	return fh, name, s.exportOf(fh), true
}

func (s *Server) lookup(c *call, w *xdr.Writer) bool {
	dir, name, ex, ok := s.dirArg(c)
	if !ok {
		return false
	}
	if ex == nil {
		return badHandle(w, 1)
	}
	fh, obj, da, err := ex.Lookup(c.cred, dir, name)
	w.Uint32(status(err))
	if err != nil {
		putPostOp(w, da, ex.FSID())
		return true
	}
	w.Opaque(fh)
	putPostOp(w, &obj, ex.FSID())
	putPostOp(w, da, ex.FSID())
	return true
}

// putCreated writes the result of CREATE, MKDIR, SYMLINK and MKNOD.
func putCreated(w *xdr.Writer, out export.Created, err error, fsid uint64) bool {
	w.Uint32(status(err))
	if err == nil {
		putPostOpFH(w, out.FH)
		putPostOp(w, out.Obj, fsid)
	}
	putWcc(w, out.Dir, fsid)
	return true
}

func (s *Server) create(c *call, w *xdr.Writer) bool {
	dir, name, ex, ok := s.dirArg(c)
	how := export.CreateHow(c.args.Uint32())
	var attrs export.SetAttr
	var verf [8]byte
	switch how {
	case export.Unchecked, export.Guarded:
		attrs, ok = getSattr(c.args)
	case export.Exclusive:
		copy(verf[:], c.args.Fixed(8))
	default:
		return false
	}
	if !ok || c.args.Err() != nil {
		return false
	}
	if ex == nil {
		return badHandle(w, 2)
	}
	out, err := ex.Create(c.cred, dir, name, how, attrs, verf)
	return putCreated(w, out, err, ex.FSID())
}

func (s *Server) mkdir(c *call, w *xdr.Writer) bool {
	dir, name, ex, ok := s.dirArg(c)
	attrs, aok := getSattr(c.args)
	if !ok || !aok {
		return false
	}
	if ex == nil {
		return badHandle(w, 2)
	}
	out, err := ex.Mkdir(c.cred, dir, name, attrs)
	return putCreated(w, out, err, ex.FSID())
}

func (s *Server) symlink(c *call, w *xdr.Writer) bool {
	dir, name, ex, ok := s.dirArg(c)
	attrs, aok := getSattr(c.args)
	target := c.args.String(maxPath)
	if !ok || !aok || c.args.Err() != nil {
		return false
	}
	if ex == nil {
		return badHandle(w, 2)
	}
	out, err := ex.Symlink(c.cred, dir, name, target, attrs)
	return putCreated(w, out, err, ex.FSID())
}

// ftype3 values MKNOD takes.
const (
	nf3Chr  = 4
	nf3Blk  = 3
	nf3Sock = 6
	nf3Fifo = 7
)

// mknod makes FIFOs and sockets; device nodes are refused (NFS3ERR_PERM,
// the guest's EPERM, as a container sandbox gets) and logged.
func (s *Server) mknod(c *call, w *xdr.Writer) bool {
	dir, name, ex, ok := s.dirArg(c)
	typ := c.args.Uint32()
	var attrs export.SetAttr
	aok := true
	switch typ {
	case nf3Chr, nf3Blk:
		getSattr(c.args)
		c.args.Uint32() // specdata3
		c.args.Uint32()
	case nf3Sock, nf3Fifo:
		attrs, aok = getSattr(c.args)
	default:
		w.Uint32(nfsErrBadType)
		putWcc(w, nil, 0)
		return ok
	}
	if !ok || !aok || c.args.Err() != nil {
		return false
	}
	if ex == nil {
		return badHandle(w, 2)
	}
	if typ == nf3Chr || typ == nf3Blk {
		s.log.Warn("refused to create a device node", "export", ex.Name, "name", name, "uid", c.cred.UID)
		return putCreated(w, export.Created{}, export.ErrDevice, ex.FSID())
	}
	out, err := ex.Mknod(c.cred, dir, name, typ == nf3Fifo, attrs)
	return putCreated(w, out, err, ex.FSID())
}

func (s *Server) remove(c *call, w *xdr.Writer) bool { return s.unlink(c, w, false) }
func (s *Server) rmdir(c *call, w *xdr.Writer) bool  { return s.unlink(c, w, true) }

func (s *Server) unlink(c *call, w *xdr.Writer, dirs bool) bool {
	dir, name, ex, ok := s.dirArg(c)
	if !ok {
		return false
	}
	if ex == nil {
		return badHandle(w, 2)
	}
	da, err := ex.Remove(c.cred, dir, name, dirs)
	w.Uint32(status(err))
	putWcc(w, da, ex.FSID())
	return true
}

func (s *Server) rename(c *call, w *xdr.Writer) bool {
	from, fromName, ex, ok := s.dirArg(c)
	to, toName, ex2, ok2 := s.dirArg(c)
	if !ok || !ok2 {
		return false
	}
	if ex == nil || ex2 == nil {
		return badHandle(w, 4)
	}
	if ex != ex2 {
		w.Uint32(nfsErrXDev)
		putWcc(w, nil, 0)
		putWcc(w, nil, 0)
		return true
	}
	fa, ta, err := ex.Rename(c.cred, from, fromName, to, toName)
	w.Uint32(status(err))
	putWcc(w, fa, ex.FSID())
	putWcc(w, ta, ex.FSID())
	return true
}

func (s *Server) link(c *call, w *xdr.Writer) bool {
	fh, ex, ok := s.handleArg(c)
	dir, name, ex2, ok2 := s.dirArg(c)
	if !ok || !ok2 {
		return false
	}
	if ex == nil || ex2 == nil {
		return badHandle(w, 3)
	}
	if ex != ex2 {
		w.Uint32(nfsErrXDev)
		w.Bool(false)
		putWcc(w, nil, 0)
		return true
	}
	obj, da, err := ex.Link(c.cred, fh, dir, name)
	w.Uint32(status(err))
	putPostOp(w, obj, ex.FSID())
	putWcc(w, da, ex.FSID())
	return true
}
