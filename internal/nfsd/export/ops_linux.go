package export

import (
	"errors"

	"golang.org/x/sys/unix"
)

// ErrNotSync is a SETATTR whose guard (the object's ctime) no longer
// matches.
var ErrNotSync = errors.New("export: ctime guard does not match")

// TimeHow says how SETATTR changes a time.
type TimeHow int

// The ways of NFSv3's set_atime and set_mtime.
const (
	TimeKeep   TimeHow = 0
	TimeServer TimeHow = 1
	TimeClient TimeHow = 2
)

// SetAttr is NFSv3's sattr3: what to change (nil: leave as is).
type SetAttr struct {
	Mode     *uint32
	UID, GID *uint32
	Size     *uint64
	AtimeHow TimeHow
	Atime    unix.Timespec
	MtimeHow TimeHow
	Mtime    unix.Timespec
}

// Stability of a WRITE (NFSv3's stable_how).
const (
	Unstable = 0
	DataSync = 1
	FileSync = 2
)

// Getattr returns the attributes of fh.
func (e *Export) Getattr(c Cred, fh []byte) (a Attr, err error) {
	err = as(c, func() error {
		f, err := e.open(c, fh, unix.O_PATH)
		if err != nil {
			return err
		}
		defer f.close()
		a, err = fstat(f.fd)
		return err
	})
	return a, err
}

// Setattr changes fh's attributes as c; with a guard the change happens
// only if the object's ctime still is *guard. It returns the attributes
// after the change (also after a partial failure, when they could be read).
func (e *Export) Setattr(c Cred, fh []byte, s SetAttr, guard *unix.Timespec) (a *Attr, err error) {
	err = as(c, func() error {
		f, err := e.open(c, fh, unix.O_PATH)
		if err != nil {
			return err
		}
		defer f.close()
		if guard != nil {
			cur, err := fstat(f.fd)
			if err != nil {
				return err
			}
			if cur.Ctime != *guard {
				a = &cur
				return ErrNotSync
			}
		}
		err = e.setattr(c, f, fh, s, false)
		if post, serr := fstat(f.fd); serr == nil {
			a = &post
		}
		return err
	})
	return a, err
}

// setattr applies s to open file f (handle fh) on a thread running as c:
// owner and group first (a chown clears set-ID bits), then mode, size
// and the times (a truncate would move mtime). existing skips all but
// the size (CREATE UNCHECKED of a file that exists).
func (e *Export) setattr(c Cred, f *file, fh []byte, s SetAttr, existing bool) error {
	if !existing && (s.UID != nil || s.GID != nil) {
		uid, gid := -1, -1
		if s.UID != nil {
			uid = int(*s.UID)
		}
		if s.GID != nil {
			gid = int(*s.GID)
		}
		if err := unix.Fchownat(f.fd, "", uid, gid, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	if !existing && s.Mode != nil {
		if err := unix.Fchmodat(f.fd, "", *s.Mode&0o7777, unix.AT_EMPTY_PATH); err != nil {
			return err
		}
	}
	if s.Size != nil {
		w, err := e.openData(c, fh, true)
		if err != nil {
			return err
		}
		err = unix.Ftruncate(w.fd, int64(*s.Size))
		w.close()
		if err != nil {
			return err
		}
	}
	if existing || (s.AtimeHow == TimeKeep && s.MtimeHow == TimeKeep) {
		return nil
	}
	ts := []unix.Timespec{timeSpec(s.AtimeHow, s.Atime), timeSpec(s.MtimeHow, s.Mtime)}
	return unix.UtimesNanoAt(f.fd, "", ts, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW)
}

func timeSpec(how TimeHow, t unix.Timespec) unix.Timespec {
	switch how {
	case TimeServer:
		return unix.Timespec{Nsec: unix.UTIME_NOW}
	case TimeClient:
		return t
	}
	return unix.Timespec{Nsec: unix.UTIME_OMIT}
}

// NFSv3's ACCESS bits.
const (
	AccessRead    = 0x01
	AccessLookup  = 0x02
	AccessModify  = 0x04
	AccessExtend  = 0x08
	AccessDelete  = 0x10
	AccessExecute = 0x20
)

// Access reports which of the ACCESS bits in want c has on fh, checked by
// the kernel (faccessat2 with c's IDs), as knfsd maps them: on a
// directory READ is read, LOOKUP search, MODIFY, EXTEND and DELETE write
// and search; on anything else READ is read, EXECUTE execute, MODIFY and
// EXTEND write.
func (e *Export) Access(c Cred, fh []byte, want uint32) (granted uint32, a Attr, err error) {
	err = as(c, func() error {
		f, err := e.open(c, fh, unix.O_PATH)
		if err != nil {
			return err
		}
		defer f.close()
		if a, err = fstat(f.fd); err != nil {
			return err
		}
		can := map[uint32]bool{}
		check := func(mode uint32) bool {
			if v, ok := can[mode]; ok {
				return v
			}
			v := unix.Faccessat2(f.fd, "", mode, unix.AT_EMPTY_PATH|unix.AT_EACCESS) == nil
			can[mode] = v
			return v
		}
		table := map[uint32]uint32{AccessRead: unix.R_OK, AccessExecute: unix.X_OK, AccessModify: unix.W_OK, AccessExtend: unix.W_OK}
		if a.IsDir() {
			table = map[uint32]uint32{AccessRead: unix.R_OK, AccessLookup: unix.X_OK, AccessModify: unix.W_OK | unix.X_OK,
				AccessExtend: unix.W_OK | unix.X_OK, AccessDelete: unix.W_OK | unix.X_OK}
		}
		for bit, mode := range table {
			if want&bit != 0 && check(mode) {
				granted |= bit
			}
		}
		return nil
	})
	return granted, a, err
}

// Readlink returns the target of symlink fh (never followed here).
func (e *Export) Readlink(c Cred, fh []byte) (target string, a Attr, err error) {
	err = as(c, func() error {
		f, err := e.open(c, fh, unix.O_PATH)
		if err != nil {
			return err
		}
		defer f.close()
		if a, err = fstat(f.fd); err != nil {
			return err
		}
		if a.Mode&unix.S_IFMT != unix.S_IFLNK {
			return unix.EINVAL
		}
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(f.fd, "", buf)
		if err != nil {
			return err
		}
		target = string(buf[:n])
		return nil
	})
	return target, a, err
}

// openData opens regular file fh for reading or writing as c (the thread
// runs as c). Like knfsd, the file's owner may do either whatever the
// mode bits say, and reading is allowed with execute permission (a
// client pages in programs it may only execute); the open is then made
// as root. Not a regular file: EISDIR for a directory, else EINVAL.
func (e *Export) openData(c Cred, fh []byte, write bool) (*file, error) {
	flags := unix.O_RDONLY | unix.O_NONBLOCK
	if write {
		flags = unix.O_WRONLY | unix.O_NONBLOCK
	}
	f, err := e.open(c, fh, flags)
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EISDIR) {
		p, perr := e.open(c, fh, unix.O_PATH)
		if perr != nil {
			return nil, err
		}
		a, serr := fstat(p.fd)
		exec := !write && unix.Faccessat2(p.fd, "", unix.X_OK, unix.AT_EMPTY_PATH|unix.AT_EACCESS) == nil
		p.close()
		switch {
		case serr != nil:
			return nil, serr
		case a.IsDir():
			return nil, unix.EISDIR
		case a.Mode&unix.S_IFMT != unix.S_IFREG:
			return nil, unix.EINVAL
		case a.UID != squash(c).UID && !exec:
			return nil, err
		}
		err = asRoot(c, func() error {
			var rerr error
			f, rerr = e.open(rootCred, fh, flags)
			return rerr
		})
	}
	if err != nil {
		return nil, err
	}
	a, err := fstat(f.fd)
	if err == nil && a.Mode&unix.S_IFMT != unix.S_IFREG {
		err = unix.EINVAL
	}
	if err != nil {
		f.close()
		return nil, err
	}
	return f, nil
}

// Read reads up to count bytes of fh at off; eof: the data ends the file.
func (e *Export) Read(c Cred, fh []byte, off uint64, count int) (data []byte, eof bool, a Attr, err error) {
	err = as(c, func() error {
		f, err := e.openData(c, fh, false)
		if err != nil {
			return err
		}
		defer f.close()
		buf := make([]byte, count)
		n := 0
		for n < count {
			k, err := unix.Pread(f.fd, buf[n:], int64(off)+int64(n))
			if err != nil {
				return err
			}
			if k == 0 {
				break
			}
			n += k
		}
		data = buf[:n]
		if a, err = fstat(f.fd); err != nil {
			return err
		}
		eof = off+uint64(n) >= a.Size
		return nil
	})
	return data, eof, a, err
}

// Write writes data to fh at off, synced as stable asks; it returns how
// much was written (short only when the disk filled after some of it)
// and how stable it is.
func (e *Export) Write(c Cred, fh []byte, off uint64, data []byte, stable int) (n int, committed int, a *Attr, err error) {
	err = as(c, func() error {
		f, err := e.openData(c, fh, true)
		if err != nil {
			return err
		}
		defer f.close()
		for n < len(data) {
			k, err := unix.Pwrite(f.fd, data[n:], int64(off)+int64(n))
			if err != nil {
				if n > 0 {
					break
				}
				return err
			}
			n += k
		}
		committed = Unstable
		switch stable {
		case FileSync:
			err = unix.Fsync(f.fd)
			committed = FileSync
		case DataSync:
			err = unix.Fdatasync(f.fd)
			committed = DataSync
		}
		if post, serr := fstat(f.fd); serr == nil {
			a = &post
		}
		return err
	})
	return n, committed, a, err
}

// Commit syncs fh's data to disk. It reveals and changes nothing, so it
// is done as root whatever c may open.
func (e *Export) Commit(c Cred, fh []byte) (a *Attr, err error) {
	err = as(c, func() error {
		return asRoot(c, func() error {
			f, err := e.open(rootCred, fh, unix.O_RDONLY|unix.O_NONBLOCK)
			if err != nil {
				return err
			}
			defer f.close()
			post, err := fstat(f.fd)
			if err != nil {
				return err
			}
			a = &post
			if post.Mode&unix.S_IFMT != unix.S_IFREG {
				return nil
			}
			return unix.Fdatasync(f.fd)
		})
	})
	return a, err
}
