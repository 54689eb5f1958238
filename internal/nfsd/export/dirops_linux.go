package export

import (
	"encoding/binary"
	"errors"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrDevice is a MKNOD of a character or block device: refused, a guest
// gets no device node on a volume.
var ErrDevice = errors.New("export: device nodes are not created")

// CreateHow is NFSv3's createmode3.
type CreateHow int

// The modes of CREATE.
const (
	Unchecked CreateHow = 0
	Guarded   CreateHow = 1
	Exclusive CreateHow = 2
)

// Created is what a creating procedure returns: the new object's handle
// and attributes, and the directory's attributes after it.
type Created struct {
	FH  []byte
	Obj *Attr
	Dir *Attr
}

// checkName accepts one path component a client may create or remove.
func checkName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return unix.EINVAL
	case len(name) > 255:
		return unix.ENAMETOOLONG
	case strings.ContainsAny(name, "/\x00"):
		return unix.EINVAL
	}
	return nil
}

// inDir opens directory dirfh as c and runs f on it; the directory's
// attributes afterwards are returned when they can be read.
func (e *Export) inDir(c Cred, dirfh []byte, f func(d *file) error) (*Attr, error) {
	var post *Attr
	err := as(c, func() error {
		d, err := e.open(c, dirfh, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return err
		}
		defer d.close()
		err = f(d)
		if a, serr := fstat(d.fd); serr == nil {
			post = &a
		}
		return err
	})
	return post, err
}

// child is name in d: its key, opened O_PATH (never followed).
func (e *Export) child(d *file, name string) (*file, error) {
	fd, err := openAt(d.fd, name, unix.O_PATH)
	if err != nil {
		return nil, err
	}
	key, err := handleKey(fd, "", unix.AT_EMPTY_PATH)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	a, err := fstat(fd)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &file{fd: fd, key: key, n: e.remember(key, d.n, name, a.IsDir())}, nil
}

// Lookup finds name in directory dirfh: "." is the directory, ".." its
// parent (the root's is the root).
func (e *Export) Lookup(c Cred, dirfh []byte, name string) (fh []byte, obj Attr, dir *Attr, err error) {
	if name != "." && name != ".." {
		if err := checkName(name); err != nil {
			return nil, Attr{}, nil, err
		}
	}
	dir, err = e.inDir(c, dirfh, func(d *file) error {
		var f *file
		var err error
		switch name {
		case ".":
			f, err = e.open(c, e.wire(d.key), unix.O_PATH)
		case "..":
			e.mu.Lock()
			key := e.rootKey
			if d.n.parent != nil {
				key = d.n.parent.key
			}
			e.mu.Unlock()
			f, err = e.open(c, e.wire(key), unix.O_PATH)
		default:
			f, err = e.child(d, name)
		}
		if err != nil {
			return err
		}
		defer f.close()
		obj, err = fstat(f.fd)
		fh = e.wire(f.key)
		return err
	})
	return fh, obj, dir, err
}

// created finishes a creating procedure: it finds the new object name in
// d, applies the rest of s (not the mode, which the creation set), and
// returns its handle and attributes.
func (e *Export) created(c Cred, d *file, name string, s SetAttr, out *Created) error {
	ch, err := e.child(d, name)
	if err != nil {
		return err
	}
	defer ch.close()
	out.FH = e.wire(ch.key)
	s.Mode = nil
	err = e.setattr(c, ch, out.FH, s, false)
	if a, serr := fstat(ch.fd); serr == nil {
		out.Obj = &a
	}
	return err
}

// Create makes regular file name in dirfh (see CreateHow; Exclusive
// stores verf in the file's atime and mtime, as knfsd does, so that a
// retransmitted create succeeds).
func (e *Export) Create(c Cred, dirfh []byte, name string, how CreateHow, s SetAttr, verf [8]byte) (out Created, err error) {
	if err := checkName(name); err != nil {
		return out, err
	}
	mode := uint32(0o644)
	if s.Mode != nil {
		mode = *s.Mode & 0o7777
	}
	if how == Exclusive {
		mode, s = 0o600, SetAttr{AtimeHow: TimeClient, MtimeHow: TimeClient,
			Atime: unix.Timespec{Sec: int64(binary.BigEndian.Uint32(verf[:4]))},
			Mtime: unix.Timespec{Sec: int64(binary.BigEndian.Uint32(verf[4:]))}}
	}
	out.Dir, err = e.inDir(c, dirfh, func(d *file) error {
		err := unix.Mknodat(d.fd, name, unix.S_IFREG|mode, 0)
		if errors.Is(err, unix.EEXIST) {
			return e.createExisting(c, d, name, how, s, &out)
		}
		if err != nil {
			return err
		}
		return e.created(c, d, name, s, &out)
	})
	return out, err
}

// createExisting is CREATE of a name that exists: fine for Unchecked
// (only the size is applied) and for the retransmission of an Exclusive
// create (the verifier matches), else EEXIST.
func (e *Export) createExisting(c Cred, d *file, name string, how CreateHow, s SetAttr, out *Created) error {
	if how == Guarded {
		return unix.EEXIST
	}
	ch, err := e.child(d, name)
	if err != nil {
		return err
	}
	defer ch.close()
	a, err := fstat(ch.fd)
	if err != nil {
		return err
	}
	if a.Mode&unix.S_IFMT != unix.S_IFREG {
		return unix.EEXIST
	}
	out.FH, out.Obj = e.wire(ch.key), &a
	if how == Exclusive {
		if a.Atime.Sec != s.Atime.Sec || a.Mtime.Sec != s.Mtime.Sec {
			return unix.EEXIST
		}
		return nil
	}
	if err := e.setattr(c, ch, out.FH, SetAttr{Size: s.Size}, true); err != nil {
		return err
	}
	if a, err := fstat(ch.fd); err == nil {
		out.Obj = &a
	}
	return nil
}

// Mkdir makes directory name in dirfh.
func (e *Export) Mkdir(c Cred, dirfh []byte, name string, s SetAttr) (out Created, err error) {
	if err := checkName(name); err != nil {
		return out, err
	}
	mode := uint32(0o755)
	if s.Mode != nil {
		mode = *s.Mode & 0o7777
	}
	out.Dir, err = e.inDir(c, dirfh, func(d *file) error {
		if err := unix.Mkdirat(d.fd, name, mode); err != nil {
			return err
		}
		return e.created(c, d, name, s, &out)
	})
	return out, err
}

// Symlink makes symlink name in dirfh pointing at target (which this
// server never follows).
func (e *Export) Symlink(c Cred, dirfh []byte, name, target string, s SetAttr) (out Created, err error) {
	if err := checkName(name); err != nil {
		return out, err
	}
	if target == "" || len(target) >= unix.PathMax || strings.IndexByte(target, 0) >= 0 {
		return out, unix.EINVAL
	}
	out.Dir, err = e.inDir(c, dirfh, func(d *file) error {
		if err := unix.Symlinkat(target, d.fd, name); err != nil {
			return err
		}
		s.AtimeHow, s.MtimeHow = TimeKeep, TimeKeep
		return e.created(c, d, name, s, &out)
	})
	return out, err
}

// Mknod makes a FIFO (fifo) or a socket (!fifo) name in dirfh. Device
// nodes are refused before this (ErrDevice).
func (e *Export) Mknod(c Cred, dirfh []byte, name string, fifo bool, s SetAttr) (out Created, err error) {
	if err := checkName(name); err != nil {
		return out, err
	}
	mode := uint32(0o644)
	if s.Mode != nil {
		mode = *s.Mode & 0o7777
	}
	typ := uint32(unix.S_IFSOCK)
	if fifo {
		typ = unix.S_IFIFO
	}
	out.Dir, err = e.inDir(c, dirfh, func(d *file) error {
		if err := unix.Mknodat(d.fd, name, typ|mode, 0); err != nil {
			return err
		}
		return e.created(c, d, name, s, &out)
	})
	return out, err
}

// Remove unlinks non-directory name from dirfh (rmdir: directory name).
func (e *Export) Remove(c Cred, dirfh []byte, name string, rmdir bool) (*Attr, error) {
	if rmdir && name == "." {
		return nil, unix.EINVAL
	}
	if rmdir && name == ".." {
		return nil, unix.ENOTEMPTY
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	return e.inDir(c, dirfh, func(d *file) error {
		key, kerr := handleKey(d.fd, name, 0)
		flags := 0
		if rmdir {
			flags = unix.AT_REMOVEDIR
		}
		if err := unix.Unlinkat(d.fd, name, flags); err != nil {
			return err
		}
		if kerr == nil {
			e.forget(key, d.n, name)
		}
		return nil
	})
}
