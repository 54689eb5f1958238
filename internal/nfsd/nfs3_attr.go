package nfsd

import (
	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/nfsd/export"
	"github.com/moatsh/moat/internal/nfsd/xdr"
)

// A proc decodes its arguments from c.args and writes its results to w
// (after the accepted reply header); false means the arguments did not
// decode (GARBAGE_ARGS).
type proc func(s *Server, c *call, w *xdr.Writer) bool

var nfsProcs = [...]proc{
	0: func(*Server, *call, *xdr.Writer) bool { return true }, // NULL
	1: (*Server).getattr, 2: (*Server).setattr, 3: (*Server).lookup, 4: (*Server).access,
	5: (*Server).readlink, 6: (*Server).read, 7: (*Server).write, 8: (*Server).create,
	9: (*Server).mkdir, 10: (*Server).symlink, 11: (*Server).mknod, 12: (*Server).remove,
	13: (*Server).rmdir, 14: (*Server).rename, 15: (*Server).link, 16: (*Server).readdir,
	17: (*Server).readdirplus, 18: (*Server).fsstat, 19: (*Server).fsinfo, 20: (*Server).pathconf,
	21: (*Server).commit,
}

// handleArg decodes a handle argument and finds its export; a nil export
// with ok means the handle is malformed (the status is already written,
// with the void result every procedure's failure arm starts with).
func (s *Server) handleArg(c *call) ([]byte, *export.Export, bool) {
	fh := c.args.Opaque(export.MaxHandle)
	if c.args.Err() != nil {
		return nil, nil, false
	}
	return fh, s.exportOf(fh), true
}

// exportOf is the export a handle belongs to, or nil.
func (s *Server) exportOf(fh []byte) *export.Export {
	i, err := export.ExportOf(fh)
	if err != nil || i >= len(s.exports) {
		return nil
	}
	return s.exports[i]
}

// badHandle writes NFS3ERR_BADHANDLE and the failure arm's
// post-operation attributes (absent); every result that starts with a
// post_op_attr or wcc_data on failure has this shape when postOps says
// how many follow.
func badHandle(w *xdr.Writer, postOps int) bool {
	w.Uint32(nfsErrBadHandle)
	for range postOps {
		w.Bool(false)
	}
	return true
}

func (s *Server) getattr(c *call, w *xdr.Writer) bool {
	fh, ex, ok := s.handleArg(c)
	if !ok {
		return false
	}
	if ex == nil {
		return badHandle(w, 0)
	}
	a, err := ex.Getattr(c.cred, fh)
	w.Uint32(status(err))
	if err == nil {
		putFattr(w, &a, ex.FSID())
	}
	return true
}

func (s *Server) setattr(c *call, w *xdr.Writer) bool {
	fh, ex, ok := s.handleArg(c)
	if !ok {
		return false
	}
	attrs, ok := getSattr(c.args)
	var guard *unix.Timespec
	if c.args.Bool() {
		t := getTime(c.args)
		guard = &t
	}
	if !ok || c.args.Err() != nil {
		return false
	}
	if ex == nil {
		return badHandle(w, 2)
	}
	a, err := ex.Setattr(c.cred, fh, attrs, guard)
	w.Uint32(status(err))
	putWcc(w, a, ex.FSID())
	return true
}

// postOpProc runs a procedure whose arguments are a handle and what
// decode reads, and whose result is a status, the object's post_op_attr
// and, on success, what rest writes (ACCESS, READLINK, FSSTAT, FSINFO,
// PATHCONF). decode may be nil.
func (s *Server) postOpProc(c *call, w *xdr.Writer, decode func(),
	op func(ex *export.Export, fh []byte) (export.Attr, error), rest func()) bool {
	fh, ex, ok := s.handleArg(c)
	if decode != nil {
		decode()
	}
	if !ok || c.args.Err() != nil {
		return false
	}
	if ex == nil {
		return badHandle(w, 1)
	}
	a, err := op(ex, fh)
	w.Uint32(status(err))
	if err != nil {
		w.Bool(false)
		return true
	}
	putPostOp(w, &a, ex.FSID())
	rest()
	return true
}

func (s *Server) access(c *call, w *xdr.Writer) bool {
	var want, granted uint32
	return s.postOpProc(c, w, func() { want = c.args.Uint32() }, func(ex *export.Export, fh []byte) (a export.Attr, err error) {
		granted, a, err = ex.Access(c.cred, fh, want)
		return a, err
	}, func() { w.Uint32(granted) })
}

func (s *Server) readlink(c *call, w *xdr.Writer) bool {
	var target string
	return s.postOpProc(c, w, nil, func(ex *export.Export, fh []byte) (a export.Attr, err error) {
		target, a, err = ex.Readlink(c.cred, fh)
		return a, err
	}, func() { w.String(target) })
}

func (s *Server) fsstat(c *call, w *xdr.Writer) bool {
	var st unix.Statfs_t
	return s.postOpProc(c, w, nil, func(ex *export.Export, fh []byte) (a export.Attr, err error) {
		st, a, err = ex.Fsstat(c.cred, fh)
		return a, err
	}, func() {
		bs := uint64(st.Bsize)
		w.Uint64(st.Blocks * bs)
		w.Uint64(st.Bfree * bs)
		w.Uint64(st.Bavail * bs)
		w.Uint64(st.Files)
		w.Uint64(st.Ffree)
		w.Uint64(st.Ffree)
		w.Uint32(0) // invarsec: the volume is shared, nothing is invariant
	})
}

// getattrOf is the op of the procedures that only need the attributes.
func getattrOf(c *call) func(*export.Export, []byte) (export.Attr, error) {
	return func(ex *export.Export, fh []byte) (export.Attr, error) { return ex.Getattr(c.cred, fh) }
}

func (s *Server) fsinfo(c *call, w *xdr.Writer) bool {
	return s.postOpProc(c, w, nil, getattrOf(c), func() {
		for _, v := range []uint32{maxIO, maxIO, 4096, maxIO, maxIO, 4096, 64 << 10} { // rt max/pref/mult, wt max/pref/mult, dtpref
			w.Uint32(v)
		}
		w.Uint64(1 << 44) // maxfilesize: ext4's 16 TiB
		w.Uint32(0)       // time_delta: 1 ns
		w.Uint32(1)
		w.Uint32(0x1 | 0x2 | 0x8 | 0x10) // FSF3_LINK, SYMLINK, HOMOGENEOUS, CANSETTIME
	})
}

func (s *Server) pathconf(c *call, w *xdr.Writer) bool {
	return s.postOpProc(c, w, nil, getattrOf(c), func() {
		w.Uint32(65000)   // linkmax (ext4)
		w.Uint32(maxName) // name_max
		w.Bool(true)      // no_trunc
		w.Bool(true)      // chown_restricted
		w.Bool(false)     // case_insensitive
		w.Bool(true)      // case_preserving
	})
}
