package volume

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/errdefs"
)

// FS is the content of a held volume, for the volume content API. Every
// lookup goes through openat2 from the root with RESOLVE_IN_ROOT (nothing
// resolves above it), RESOLVE_NO_SYMLINKS (a symlink a sandbox planted is
// refused, not followed, anywhere in the path) and RESOLVE_NO_XDEV; the
// last component is then used with *at calls that do not follow it.
type FS struct {
	root *os.File // the mount's root directory
}

const resolveFlags = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// OpenFS opens the root of a held volume's mount.
func OpenFS(root string) (*FS, error) {
	f, err := os.OpenFile(root, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("open volume root: %w", err)
	}
	return &FS{root: f}, nil
}

// Close closes the root.
func (v *FS) Close() error { return v.root.Close() }

// openAt opens comps under the root with flags (O_CLOEXEC added).
func (v *FS) openAt(comps []string, flags int, mode uint32) (*os.File, error) {
	name := "."
	if len(comps) > 0 {
		name = strings.Join(comps, "/")
	}
	fd, err := unix.Openat2(int(v.root.Fd()), name, &unix.OpenHow{
		Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: resolveFlags})
	if err != nil {
		return nil, pathErr(comps, err)
	}
	return os.NewFile(uintptr(fd), display(comps)), nil
}

// parent opens the directory holding the last component; mkdirs creates
// the missing ones (owned as given).
func (v *FS) parent(comps []string, mkdirs bool, own Owner) (*os.File, string, error) {
	if len(comps) == 0 {
		return nil, "", errdefs.Publicf(errdefs.ErrInvalidArgument, "the volume's root cannot be used here")
	}
	dir := comps[:len(comps)-1]
	if mkdirs {
		for i := range dir {
			if _, err := v.mkdir(dir[:i+1], 0o755, own); err != nil && !errors.Is(err, errdefs.ErrAlreadyExists) {
				return nil, "", err
			}
		}
	}
	d, err := v.openAt(dir, unix.O_DIRECTORY|unix.O_RDONLY, 0)
	return d, comps[len(comps)-1], err
}

// Owner is the uid, gid and mode the API may set on what it creates
// (nil: the defaults).
type Owner struct{ UID, GID, Mode *uint32 }

// Defaults of what the API creates: the sandbox user's (see Create).
const defaultUID, defaultGID = 1000, 1000

func (o Owner) apply(f *os.File) error {
	uid, gid := defaultUID, defaultGID
	if o.UID != nil {
		uid = int(*o.UID)
	}
	if o.GID != nil {
		gid = int(*o.GID)
	}
	if err := unix.Fchown(int(f.Fd()), uid, gid); err != nil {
		return fmt.Errorf("chown %s: %w", f.Name(), err)
	}
	if o.Mode != nil {
		if err := unix.Fchmod(int(f.Fd()), *o.Mode&0o7777); err != nil {
			return fmt.Errorf("chmod %s: %w", f.Name(), err)
		}
	}
	return nil
}

func (v *FS) mkdir(comps []string, mode uint32, own Owner) (Entry, error) {
	d, name, err := v.parent(comps, false, own)
	if err != nil {
		return Entry{}, err
	}
	defer d.Close()
	if err := unix.Mkdirat(int(d.Fd()), name, mode); err != nil {
		return Entry{}, pathErr(comps, err)
	}
	f, err := v.openAt(comps, unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		return Entry{}, err
	}
	defer f.Close()
	if err := own.apply(f); err != nil {
		return Entry{}, err
	}
	return statFd(f, comps)
}

// MakeDir creates directory p; with force, missing parents too and an
// existing directory is no error (mkdir -p).
func (v *FS) MakeDir(p string, force bool, own Owner) (Entry, error) {
	comps, err := Clean(p)
	if err != nil {
		return Entry{}, err
	}
	if force {
		d, _, err := v.parent(comps, true, own)
		if err != nil {
			return Entry{}, err
		}
		d.Close()
	}
	e, err := v.mkdir(comps, 0o755, own)
	if force && errors.Is(err, errdefs.ErrAlreadyExists) {
		return v.Stat(p)
	}
	return e, err
}

// Stat describes p without following it (a symlink is reported as one).
func (v *FS) Stat(p string) (Entry, error) {
	comps, err := Clean(p)
	if err != nil {
		return Entry{}, err
	}
	if len(comps) == 0 {
		return statFd(v.root, nil)
	}
	d, name, err := v.parent(comps, false, Owner{})
	if err != nil {
		return Entry{}, err
	}
	defer d.Close()
	return statAt(d, name, comps)
}

// ReadFile opens regular file p for reading.
func (v *FS) ReadFile(p string) (*os.File, int64, error) {
	comps, err := Clean(p)
	if err != nil {
		return nil, 0, err
	}
	f, err := v.openAt(comps, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, 0, errdefs.Publicf(errdefs.ErrInvalidArgument, "path %q is not a regular file", display(comps))
	}
	return f, st.Size, nil
}

// WriteFile creates or replaces file p (and its missing parents) with r's
// bytes. A full volume is errdefs.ErrNoSpace.
func (v *FS) WriteFile(p string, r io.Reader, own Owner) (Entry, error) {
	comps, err := Clean(p)
	if err != nil {
		return Entry{}, err
	}
	d, _, err := v.parent(comps, true, Owner{UID: own.UID, GID: own.GID})
	if err != nil {
		return Entry{}, err
	}
	d.Close()
	f, err := v.openAt(comps, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o644)
	if err != nil {
		return Entry{}, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return Entry{}, errdefs.Publicf(errdefs.ErrInvalidArgument, "path %q is not a regular file", display(comps))
	}
	if err := own.apply(f); err != nil {
		return Entry{}, err
	}
	if _, err := io.Copy(f, r); err != nil {
		return Entry{}, pathErr(comps, err)
	}
	if err := f.Sync(); err != nil {
		return Entry{}, pathErr(comps, err)
	}
	return statFd(f, comps)
}

// SetMeta changes p's owner and mode (not following a symlink).
func (v *FS) SetMeta(p string, own Owner) (Entry, error) {
	comps, err := Clean(p)
	if err != nil {
		return Entry{}, err
	}
	f, err := v.openAt(comps, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return Entry{}, err
	}
	defer f.Close()
	if e, err := statFd(f, comps); err != nil || e.Type == TypeSymlink {
		if err == nil {
			err = pathErr(comps, unix.ELOOP)
		}
		return Entry{}, err
	}
	// O_PATH fds take neither fchown nor fchmod: go through /proc's
	// magic link of this very fd, which cannot be swapped under us.
	proc := fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	if own.UID != nil || own.GID != nil {
		uid, gid := -1, -1
		if own.UID != nil {
			uid = int(*own.UID)
		}
		if own.GID != nil {
			gid = int(*own.GID)
		}
		if err := unix.Fchownat(unix.AT_FDCWD, proc, uid, gid, 0); err != nil {
			return Entry{}, pathErr(comps, err)
		}
	}
	if own.Mode != nil {
		if err := unix.Fchmodat(unix.AT_FDCWD, proc, *own.Mode&0o7777, 0); err != nil {
			return Entry{}, pathErr(comps, err)
		}
	}
	return statFd(f, comps)
}

// MaxListEntries bounds one listing (a sandbox can fill a volume with
// entries; the answer is built in memory).
const MaxListEntries = 100_000

// List returns the entries of directory p, recursing depth levels (1: its
// own entries only).
func (v *FS) List(p string, depth int) ([]Entry, error) {
	comps, err := Clean(p)
	if err != nil {
		return nil, err
	}
	out := []Entry{}
	return out, v.list(comps, depth, &out)
}

func (v *FS) list(comps []string, depth int, out *[]Entry) error {
	d, err := v.openAt(comps, unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return pathErr(comps, err)
	}
	for _, n := range names {
		child := append(comps[:len(comps):len(comps)], n)
		e, err := statAt(d, n, child)
		if err != nil {
			return err
		}
		if len(*out) >= MaxListEntries {
			return errdefs.Publicf(errdefs.ErrInvalidArgument,
				"listing %q has more than %d entries: list with a smaller depth", display(comps), MaxListEntries)
		}
		*out = append(*out, e)
		if depth > 1 && e.Type == TypeDirectory {
			if err := v.list(child, depth-1, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// Remove deletes p, a directory recursively (never following symlinks:
// a symlink is removed, not its target).
func (v *FS) Remove(p string) error {
	comps, err := Clean(p)
	if err != nil {
		return err
	}
	d, name, err := v.parent(comps, false, Owner{})
	if err != nil {
		return err
	}
	defer d.Close()
	return removeAt(d, name, comps)
}

func removeAt(d *os.File, name string, comps []string) error {
	err := unix.Unlinkat(int(d.Fd()), name, 0)
	if !errors.Is(err, unix.EISDIR) {
		return pathErr(comps, err)
	}
	fd, err := unix.Openat2(int(d.Fd()), name, &unix.OpenHow{
		Flags: unix.O_DIRECTORY | unix.O_RDONLY | unix.O_CLOEXEC, Resolve: resolveFlags})
	if err != nil {
		return pathErr(comps, err)
	}
	sub := os.NewFile(uintptr(fd), display(comps))
	names, err := sub.Readdirnames(-1)
	if err == nil {
		for _, n := range names {
			if err = removeAt(sub, n, append(comps[:len(comps):len(comps)], n)); err != nil {
				break
			}
		}
	}
	sub.Close()
	if err != nil {
		return pathErr(comps, err)
	}
	return pathErr(comps, unix.Unlinkat(int(d.Fd()), name, unix.AT_REMOVEDIR))
}

func statAt(d *os.File, name string, comps []string) (Entry, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(int(d.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Entry{}, pathErr(comps, err)
	}
	e := entry(&st, comps)
	if e.Type == TypeSymlink {
		buf := make([]byte, 4096)
		if n, err := unix.Readlinkat(int(d.Fd()), name, buf); err == nil {
			e.Target = string(buf[:n])
		}
	}
	return e, nil
}

func statFd(f *os.File, comps []string) (Entry, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return Entry{}, pathErr(comps, err)
	}
	return entry(&st, comps), nil
}

func entry(st *unix.Stat_t, comps []string) Entry {
	typ := TypeUnknown
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		typ = TypeFile
	case unix.S_IFDIR:
		typ = TypeDirectory
	case unix.S_IFLNK:
		typ = TypeSymlink
	}
	name := "/"
	if len(comps) > 0 {
		name = comps[len(comps)-1]
	}
	ts := func(t unix.Timespec) time.Time { return time.Unix(t.Sec, t.Nsec).UTC() }
	return Entry{Name: name, Path: display(comps), Type: typ, Size: st.Size,
		Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid, Atime: ts(st.Atim), Mtime: ts(st.Mtim), Ctime: ts(st.Ctim)}
}

// pathErr maps a syscall error on comps to an API error (nil stays nil).
func pathErr(comps []string, err error) error {
	p := display(comps)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOENT):
		return errdefs.Publicf(errdefs.ErrNotFound, "path %q not found", p)
	case errors.Is(err, unix.ELOOP):
		return errdefs.Publicf(errdefs.ErrInvalidArgument,
			"path %q is or goes through a symlink: the volume API does not follow symlinks", p)
	case errors.Is(err, unix.EXDEV):
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "path %q leaves the volume", p)
	case errors.Is(err, unix.EEXIST), errors.Is(err, unix.ENOTEMPTY):
		return errdefs.Publicf(errdefs.ErrAlreadyExists, "path %q already exists", p)
	case errors.Is(err, unix.ENOTDIR):
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "a parent of path %q is not a directory", p)
	case errors.Is(err, unix.ENXIO), errors.Is(err, unix.ENODEV):
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "path %q is not a regular file", p)
	case errors.Is(err, unix.EISDIR):
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "path %q is a directory", p)
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return errdefs.Publicf(errdefs.ErrNoSpace, "the volume is full (writing %q)", p)
	case errors.Is(err, unix.ENAMETOOLONG):
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "path %q is too long", p)
	}
	return fmt.Errorf("volume path %s: %w", p, err)
}
