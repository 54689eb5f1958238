package nfsd

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/nfsd/export"
	"github.com/moatsh/moat/internal/nfsd/xdr"
)

// NFSv3 (RFC 1813): program numbers, limits and the encodings every
// procedure shares.

const (
	progNFS   = 100003
	progMount = 100005
	nfsVers   = 3
	mountVers = 3

	// maxIO is the largest READ and WRITE (rtmax, wtmax); a record is
	// never larger than one WRITE with its headers.
	maxIO     = 1 << 20
	maxRecord = maxIO + 4096
	maxName   = 255
	maxPath   = 4096
)

// nfsstat3 values.
const (
	nfsOK             = 0
	nfsErrPerm        = 1
	nfsErrNoEnt       = 2
	nfsErrIO          = 5
	nfsErrNXIO        = 6
	nfsErrAcces       = 13
	nfsErrExist       = 17
	nfsErrXDev        = 18
	nfsErrNoDev       = 19
	nfsErrNotDir      = 20
	nfsErrIsDir       = 21
	nfsErrInval       = 22
	nfsErrFBig        = 27
	nfsErrNoSpc       = 28
	nfsErrROFS        = 30
	nfsErrMLink       = 31
	nfsErrNameLong    = 63
	nfsErrNotEmpty    = 66
	nfsErrDQuot       = 69
	nfsErrStale       = 70
	nfsErrBadHandle   = 10001
	nfsErrNotSync     = 10002
	nfsErrNotSupp     = 10004
	nfsErrTooSmall    = 10005
	nfsErrServerFault = 10006
	nfsErrBadType     = 10007
)

// errTooSmall is a listing whose reply size cannot hold one entry.
var errTooSmall = errors.New("nfsd: reply too small for one entry")

var errnoStatus = map[unix.Errno]uint32{
	unix.EPERM: nfsErrPerm, unix.ENOENT: nfsErrNoEnt, unix.EIO: nfsErrIO, unix.ENXIO: nfsErrNXIO,
	unix.EACCES: nfsErrAcces, unix.EEXIST: nfsErrExist, unix.EXDEV: nfsErrXDev, unix.ENODEV: nfsErrNoDev,
	unix.ENOTDIR: nfsErrNotDir, unix.EISDIR: nfsErrIsDir, unix.EINVAL: nfsErrInval, unix.EFBIG: nfsErrFBig,
	unix.ENOSPC: nfsErrNoSpc, unix.EROFS: nfsErrROFS, unix.EMLINK: nfsErrMLink, unix.ENAMETOOLONG: nfsErrNameLong,
	unix.ENOTEMPTY: nfsErrNotEmpty, unix.EDQUOT: nfsErrDQuot, unix.ESTALE: nfsErrStale,
	unix.EOPNOTSUPP: nfsErrNotSupp, unix.ELOOP: nfsErrInval, unix.EBADF: nfsErrStale,
	unix.ETXTBSY: nfsErrAcces, unix.EOVERFLOW: nfsErrFBig,
}

// status maps an export error onto nfsstat3.
func status(err error) uint32 {
	switch {
	case err == nil:
		return nfsOK
	case errors.Is(err, export.ErrBadHandle):
		return nfsErrBadHandle
	case errors.Is(err, export.ErrNotSync):
		return nfsErrNotSync
	case errors.Is(err, export.ErrDevice):
		return nfsErrPerm
	case errors.Is(err, errTooSmall):
		return nfsErrTooSmall
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		if s, ok := errnoStatus[errno]; ok {
			return s
		}
	}
	return nfsErrIO
}

// ftype3 of a st_mode.
func ftype(mode uint32) uint32 {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return 1
	case unix.S_IFDIR:
		return 2
	case unix.S_IFBLK:
		return 3
	case unix.S_IFCHR:
		return 4
	case unix.S_IFLNK:
		return 5
	case unix.S_IFSOCK:
		return 6
	case unix.S_IFIFO:
		return 7
	}
	return 1
}

// fattr3Size is what fattr3 takes on the wire.
const fattr3Size = 84

func putTime(w *xdr.Writer, t unix.Timespec) {
	w.Uint32(uint32(t.Sec))
	w.Uint32(uint32(t.Nsec))
}

func putFattr(w *xdr.Writer, a *export.Attr, fsid uint64) {
	w.Uint32(ftype(a.Mode))
	w.Uint32(a.Mode & 0o7777)
	w.Uint32(a.Nlink)
	w.Uint32(a.UID)
	w.Uint32(a.GID)
	w.Uint64(a.Size)
	w.Uint64(a.Used)
	w.Uint32(a.RdevMajor)
	w.Uint32(a.RdevMinor)
	w.Uint64(fsid)
	w.Uint64(a.FileID)
	putTime(w, a.Atime)
	putTime(w, a.Mtime)
	putTime(w, a.Ctime)
}

// putPostOp writes a post_op_attr (absent when a is nil).
func putPostOp(w *xdr.Writer, a *export.Attr, fsid uint64) {
	w.Bool(a != nil)
	if a != nil {
		putFattr(w, a, fsid)
	}
}

// putWcc writes wcc_data without before-attributes: taken apart from the
// operation they could hide a sharer's change from the client's cache,
// so clients revalidate instead.
func putWcc(w *xdr.Writer, after *export.Attr, fsid uint64) {
	w.Bool(false)
	putPostOp(w, after, fsid)
}

// putPostOpFH writes a post_op_fh3 (absent when fh is nil).
func putPostOpFH(w *xdr.Writer, fh []byte) {
	w.Bool(fh != nil)
	if fh != nil {
		w.Opaque(fh)
	}
}

func getTime(r *xdr.Reader) unix.Timespec {
	return unix.Timespec{Sec: int64(r.Uint32()), Nsec: int64(r.Uint32())}
}

// getSattr decodes a sattr3; bad enum values are an error.
func getSattr(r *xdr.Reader) (export.SetAttr, bool) {
	var s export.SetAttr
	if r.Bool() {
		v := r.Uint32()
		s.Mode = &v
	}
	if r.Bool() {
		v := r.Uint32()
		s.UID = &v
	}
	if r.Bool() {
		v := r.Uint32()
		s.GID = &v
	}
	if r.Bool() {
		v := r.Uint64()
		s.Size = &v
	}
	ok := true
	for _, t := range []struct {
		how *export.TimeHow
		ts  *unix.Timespec
	}{{&s.AtimeHow, &s.Atime}, {&s.MtimeHow, &s.Mtime}} {
		h := r.Uint32()
		switch h {
		case 0, 1:
		case 2:
			*t.ts = getTime(r)
		default:
			ok = false
		}
		*t.how = export.TimeHow(h)
	}
	return s, ok && r.Err() == nil
}

// diropargs3 is a directory handle and a name.
func getDirOp(r *xdr.Reader) ([]byte, string) {
	fh := r.Opaque(export.MaxHandle)
	return fh, r.String(maxName)
}
