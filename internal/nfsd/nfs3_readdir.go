package nfsd

import (
	"github.com/moatsh/moat/internal/nfsd/export"
	"github.com/moatsh/moat/internal/nfsd/xdr"
)

// zeroVerf is every listing's cookie verifier: cookies are the file
// system's own directory offsets (ext4's are stable hashes), valid as
// long as the directory exists.
var zeroVerf [8]byte

func (s *Server) readdir(c *call, w *xdr.Writer) bool {
	fh, ex, ok := s.handleArg(c)
	cookie := c.args.Uint64()
	c.args.Fixed(8)
	count := c.args.Uint32()
	if !ok || c.args.Err() != nil {
		return false
	}
	if ex == nil {
		return badHandle(w, 1)
	}
	return s.list(c, w, ex, fh, cookie, false, int(count), int(count))
}

func (s *Server) readdirplus(c *call, w *xdr.Writer) bool {
	fh, ex, ok := s.handleArg(c)
	cookie := c.args.Uint64()
	c.args.Fixed(8)
	dircount, maxcount := c.args.Uint32(), c.args.Uint32()
	if !ok || c.args.Err() != nil {
		return false
	}
	if ex == nil {
		return badHandle(w, 1)
	}
	return s.list(c, w, ex, fh, cookie, true, int(dircount), int(maxcount))
}

// list writes a READDIR or READDIRPLUS result: entries while the reply
// stays within maxcount bytes and (for plus) their names and cookies
// within dircount; NFS3ERR_TOOSMALL if not even one fits.
func (s *Server) list(c *call, w *xdr.Writer, ex *export.Export, fh []byte, cookie uint64, plus bool, dircount, maxcount int) bool {
	start := w.Len()
	w.Uint32(nfsOK)
	attrsAt := w.Len()
	w.Bool(false) // dir attributes, filled in below
	w.Fixed(zeroVerf[:])
	maxcount = min(maxcount, maxIO)
	n, dirBytes := 0, 0
	full := false
	add := func(e export.Entry) bool {
		size := 4 + 8 + xdr.OpaqueLen(len(e.Name)) + 8
		dsize := size
		if plus {
			size += 4 + 4
			if e.Attr != nil {
				size += fattr3Size
			}
			if e.FH != nil {
				size += xdr.OpaqueLen(len(e.FH))
			}
		}
		if w.Len()-start+fattr3Size+size+8 > maxcount || (plus && dirBytes+dsize > dircount) {
			full = true
			return false
		}
		w.Bool(true)
		w.Uint64(e.FileID)
		w.String(e.Name)
		w.Uint64(e.Cookie)
		if plus {
			putPostOp(w, e.Attr, ex.FSID())
			putPostOpFH(w, e.FH)
		}
		n++
		dirBytes += dsize
		return true
	}
	da, eof, err := ex.Readdir(c.cred, fh, cookie, plus, add)
	if err == nil && n == 0 && full {
		err = errTooSmall
	}
	if err != nil {
		w.Truncate(start)
		w.Uint32(status(err))
		putPostOp(w, da, ex.FSID())
		return true
	}
	w.Bool(false) // no more entries
	w.Bool(eof && !full)
	if da != nil {
		// Splice the directory's attributes in where the placeholder is.
		tail := append([]byte(nil), w.Bytes()[attrsAt+4:]...)
		w.Truncate(attrsAt)
		putPostOp(w, da, ex.FSID())
		w.Fixed(tail)
	}
	return true
}
