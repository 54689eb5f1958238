package export

import (
	"golang.org/x/sys/unix"
)

// Rename moves fromName in fromDir to toName in toDir (both of this
// export), as c.
func (e *Export) Rename(c Cred, fromDir []byte, fromName string, toDir []byte, toName string) (from, to *Attr, err error) {
	if err := checkName(fromName); err != nil {
		return nil, nil, err
	}
	if err := checkName(toName); err != nil {
		return nil, nil, err
	}
	from, err = e.inDir(c, fromDir, func(fd *file) error {
		var ierr error
		to, ierr = e.inDirLocked(c, toDir, func(td *file) error {
			key, kerr := handleKey(fd.fd, fromName, 0)
			old, oerr := handleKey(td.fd, toName, 0)
			if err := unix.Renameat(fd.fd, fromName, td.fd, toName); err != nil {
				return err
			}
			if oerr == nil && old != key {
				e.forget(old, td.n, toName)
			}
			if kerr == nil {
				var st unix.Stat_t
				isDir := unix.Fstatat(td.fd, toName, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
				e.remember(key, td.n, toName, isDir)
			}
			return nil
		})
		return ierr
	})
	return from, to, err
}

// inDirLocked is inDir on a thread that already runs as c.
func (e *Export) inDirLocked(c Cred, dirfh []byte, f func(d *file) error) (*Attr, error) {
	d, err := e.open(c, dirfh, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer d.close()
	err = f(d)
	var post *Attr
	if a, serr := fstat(d.fd); serr == nil {
		post = &a
	}
	return post, err
}

// Link makes name in dirfh a hard link to fh. The link is made from fh's
// directory entry (linkat of a descriptor needs a host capability), after
// checking that the entry still is fh.
func (e *Export) Link(c Cred, fh, dirfh []byte, name string) (obj, dir *Attr, err error) {
	if err := checkName(name); err != nil {
		return nil, nil, err
	}
	dir, err = e.inDir(c, dirfh, func(d *file) error {
		f, err := e.open(c, fh, unix.O_PATH)
		if err != nil {
			return err
		}
		defer f.close()
		e.mu.Lock()
		parent, srcName := f.n.parent, f.n.name
		var ppath string
		ok := parent != nil
		if ok {
			ppath, ok = parent.path()
		}
		e.mu.Unlock()
		if !ok {
			return unix.EINVAL // the root
		}
		p, err := openAt(e.root, ppath, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return unix.ESTALE
		}
		defer unix.Close(p)
		if k, err := handleKey(p, srcName, 0); err != nil || k != f.key {
			return unix.ESTALE
		}
		if err := unix.Linkat(p, srcName, d.fd, name, 0); err != nil {
			return err
		}
		if a, err := fstat(f.fd); err == nil {
			obj = &a
		}
		return nil
	})
	return obj, dir, err
}

// Entry is one directory entry of Readdir; Attr and FH are set for
// READDIRPLUS (plus) and nil for "..".
type Entry struct {
	Name   string
	FileID uint64
	Cookie uint64
	Attr   *Attr
	FH     []byte
}

// Readdir lists directory dirfh from cookie (0: the start; else an
// Entry.Cookie of an earlier call), calling add for each entry until it
// returns false; eof: the listing reached the end. Listing needs read
// permission on the directory.
func (e *Export) Readdir(c Cred, dirfh []byte, cookie uint64, plus bool, add func(Entry) bool) (dir *Attr, eof bool, err error) {
	err = as(c, func() error {
		d, err := e.open(c, dirfh, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return err
		}
		defer d.close()
		if a, err := fstat(d.fd); err == nil {
			dir = &a
		}
		if _, err := unix.Seek(d.fd, int64(cookie), 0); err != nil {
			return unix.EINVAL // NFS3ERR_BAD_COOKIE is not worth a kind of its own
		}
		buf := make([]byte, 32<<10)
		for {
			n, err := unix.Getdents(d.fd, buf)
			if err != nil {
				return err
			}
			if n == 0 {
				eof = true
				return nil
			}
			for _, ent := range parseDirents(buf[:n]) {
				if !add(e.entry(d, ent, plus)) {
					return nil
				}
			}
		}
	})
	return dir, eof, err
}

// entry is ent of directory d as Readdir gives it.
func (e *Export) entry(d *file, ent dirent, plus bool) Entry {
	out := Entry{Name: ent.name, FileID: ent.ino, Cookie: uint64(ent.off)}
	if !plus || ent.name == ".." {
		return out
	}
	key := d.key
	if ent.name != "." {
		k, err := handleKey(d.fd, ent.name, 0)
		if err != nil {
			return out
		}
		key = k
	}
	a, err := statAt(d.fd, ent.name)
	if err != nil {
		return out
	}
	if ent.name != "." {
		e.remember(key, d.n, ent.name, a.IsDir())
	}
	out.Attr, out.FH = &a, e.wire(key)
	return out
}

// Fsstat is the export's file system's space and inode counts.
func (e *Export) Fsstat(c Cred, fh []byte) (st unix.Statfs_t, a Attr, err error) {
	a, err = e.Getattr(c, fh)
	if err != nil {
		return st, a, err
	}
	err = unix.Fstatfs(e.root, &st)
	return st, a, err
}
