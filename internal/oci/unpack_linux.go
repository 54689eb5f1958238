package oci

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Unpack applies layers, bottom first, to the directory dir (which must
// exist; normally empty). Ownership is kept when running as root. It
// returns ErrUnsafeLayer for an entry that would leave dir, go through a
// symlink or is malformed, and ErrTooLarge when the layers together
// decompress to more than the limit (DefaultMaxSize). On error dir holds a
// partial tree the caller removes.
func Unpack(ctx context.Context, layers []Layer, dir string, opts ...UnpackOpt) (UnpackStats, error) {
	o := unpackOptions{maxSize: DefaultMaxSize}
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	rootFD, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return UnpackStats{}, fmt.Errorf("unpack: open %s: %w", dir, err)
	}
	defer unix.Close(rootFD)
	t := &tree{root: rootFD, chown: os.Geteuid() == 0, log: o.log}
	b := &budget{left: o.maxSize, max: o.maxSize}
	files := &budget{left: o.maxSize, max: o.maxSize}
	var st UnpackStats
	for i, l := range layers {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		if err := t.applyLayer(ctx, l, b, files, &st); err != nil {
			return st, fmt.Errorf("layer %d (%s): %w", i+1, l.Digest, err)
		}
		st.Layers++
	}
	return st, nil
}

// tree writes entries below root. Every parent directory is opened with
// openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), and the last element is
// handled with *at calls that never follow it, so no entry can reach
// outside root, not even through symlinks in the tree.
type tree struct {
	root  int
	chown bool
	log   *slog.Logger
	// layer holds the paths written by the current layer: whiteouts and
	// opaque markers only hide what lower layers wrote.
	layer map[string]bool
}

// applyLayer unpacks one layer; b limits the tar bytes read, files the
// sizes of the regular files written.
func (t *tree) applyLayer(ctx context.Context, l Layer, b, files *budget, st *UnpackStats) error {
	f, err := os.Open(l.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := decompress(f)
	if err != nil {
		return fmt.Errorf("%v: %w", err, ErrUnsupported)
	}
	defer zr.Close()
	lr := &limitedReader{r: zr, b: b}
	tr := tar.NewReader(lr)
	t.layer = map[string]bool{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		// ErrInsecurePath comes with a usable header; parseEntry decides.
		if err != nil && !errors.Is(err, tar.ErrInsecurePath) {
			if errors.Is(err, ErrTooLarge) {
				return err
			}
			return fmt.Errorf("read tar: %w", err)
		}
		if st.Entries%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		st.Entries++
		if h.Typeflag == tar.TypeReg || h.Typeflag == tar.TypeChar || h.Typeflag == tar.TypeBlock {
			// Sparse files claim more than they carry: the claimed sizes
			// (what lands on disk) have a budget of their own.
			if h.Size < 0 || h.Size > files.left {
				return fmt.Errorf("entry %q (%d bytes): files exceed %d bytes: %w",
					h.Name, h.Size, files.max, ErrTooLarge)
			}
			files.left -= h.Size
		}
		if err := t.apply(h, tr, st); err != nil {
			if errors.Is(err, ErrTooLarge) || errors.Is(err, ErrUnsafeLayer) {
				return err
			}
			return fmt.Errorf("entry %q: %w", h.Name, err)
		}
	}
	// The tar reader stops at the end-of-archive marker; trailing data
	// still counts (and a bomb hidden there still fails).
	if _, err := io.Copy(io.Discard, lr); err != nil {
		return err
	}
	st.Bytes += lr.n
	return nil
}

func (t *tree) apply(h *tar.Header, r io.Reader, st *UnpackStats) error {
	e, err := parseEntry(h.Name)
	if err != nil {
		return err
	}
	switch e.kind {
	case entryRoot, entryMeta:
		return nil
	case entryWhiteout:
		st.Whiteouts++
		return t.whiteout(e)
	case entryOpaque:
		st.Whiteouts++
		return t.opaque(e)
	}
	parent, err := t.openDir(e.dir, true)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	if h.Typeflag == tar.TypeChar || h.Typeflag == tar.TypeBlock {
		st.SkippedNodes++
		t.log.Debug("skip device node", "path", e.path)
		return nil
	}
	if h.Typeflag != tar.TypeDir {
		if err := removeAt(parent, e.base); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("replace %s: %w", e.path, err)
		}
	}
	t.mark(e.path)
	mode := uint32(h.Mode) & 0o7777
	switch h.Typeflag {
	case tar.TypeDir:
		return t.applyDir(parent, e, h, mode)
	case tar.TypeReg:
		return t.applyReg(parent, e, h, r, mode)
	case tar.TypeSymlink:
		if h.Linkname == "" || strings.IndexByte(h.Linkname, 0) >= 0 {
			return fmt.Errorf("entry %q: invalid symlink target: %w", h.Name, ErrUnsafeLayer)
		}
		// The target is stored, never followed while unpacking.
		if err := unix.Symlinkat(h.Linkname, parent, e.base); err != nil {
			return fmt.Errorf("symlink %s: %w", e.path, err)
		}
		return t.setMeta(parent, e.base, h, 0, true)
	case tar.TypeLink:
		return t.applyLink(parent, e, h)
	case tar.TypeFifo:
		if err := unix.Mknodat(parent, e.base, unix.S_IFIFO|0o600, 0); err != nil {
			return fmt.Errorf("mkfifo %s: %w", e.path, err)
		}
		return t.setMeta(parent, e.base, h, mode, false)
	}
	t.log.Debug("skip entry of unknown type", "path", e.path, "type", h.Typeflag)
	return nil
}

// applyDir makes directory e (replacing a non-directory there) and sets
// its metadata.
func (t *tree) applyDir(parent int, e entry, h *tar.Header, mode uint32) error {
	var s unix.Stat_t
	err := unix.Fstatat(parent, e.base, &s, unix.AT_SYMLINK_NOFOLLOW)
	if err == nil && s.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := removeAt(parent, e.base); err != nil {
			return fmt.Errorf("replace %s: %w", e.path, err)
		}
		err = unix.ENOENT
	}
	if errors.Is(err, unix.ENOENT) {
		if err := unix.Mkdirat(parent, e.base, 0o700); err != nil {
			return fmt.Errorf("mkdir %s: %w", e.path, err)
		}
	} else if err != nil {
		return fmt.Errorf("stat %s: %w", e.path, err)
	}
	return t.setMeta(parent, e.base, h, mode, false)
}

// applyReg creates regular file e (which must not exist: O_EXCL,
// O_NOFOLLOW) with r's h.Size bytes, its allowed xattrs, owner and mode.
func (t *tree) applyReg(parent int, e entry, h *tar.Header, r io.Reader, mode uint32) error {
	fd, err := unix.Openat(parent, e.base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", e.path, err)
	}
	f := os.NewFile(uintptr(fd), e.path)
	defer f.Close()
	if _, err := io.CopyN(f, r, h.Size); err != nil {
		return fmt.Errorf("write %s: %w", e.path, err)
	}
	for k, v := range h.PAXRecords {
		name, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if ok && (name == "security.capability" || strings.HasPrefix(name, "user.")) {
			if err := unix.Fsetxattr(fd, name, []byte(v), 0); err != nil {
				t.log.Debug("xattr not kept", "path", e.path, "xattr", name, "err", err)
			}
		}
	}
	if t.chown {
		if err := unix.Fchown(fd, h.Uid, h.Gid); err != nil {
			return fmt.Errorf("chown %s: %w", e.path, err)
		}
	}
	// After chown, which clears set-id bits.
	if err := unix.Fchmod(fd, mode); err != nil {
		return fmt.Errorf("chmod %s: %w", e.path, err)
	}
	return setTimes(parent, e.base, h)
}

// applyLink makes e a hard link to an entry already in the tree (resolved
// beneath the root, never through a symlink).
func (t *tree) applyLink(parent int, e entry, h *tar.Header) error {
	lp, err := cleanEntryPath(h.Linkname)
	if err != nil || lp == "" {
		return fmt.Errorf("entry %q: hard link target %q: %w", h.Name, h.Linkname, ErrUnsafeLayer)
	}
	ldir, lbase := "", lp
	if i := strings.LastIndexByte(lp, '/'); i >= 0 {
		ldir, lbase = lp[:i], lp[i+1:]
	}
	lparent, err := t.openDir(ldir, false)
	if err != nil {
		return fmt.Errorf("hard link target %q: %w", h.Linkname, err)
	}
	defer unix.Close(lparent)
	// flags 0: a link to a symlink links the symlink itself.
	if err := unix.Linkat(lparent, lbase, parent, e.base, 0); err != nil {
		return fmt.Errorf("hard link %s to %s: %w", e.path, lp, err)
	}
	return nil
}

// mark records that the current layer wrote p (and so its parents).
func (t *tree) mark(p string) {
	for p != "" && !t.layer[p] {
		t.layer[p] = true
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			break
		}
		p = p[:i]
	}
}

// setMeta sets owner, mode (unless symlink) and times of base in parent.
func (t *tree) setMeta(parent int, base string, h *tar.Header, mode uint32, symlink bool) error {
	if t.chown {
		if err := unix.Fchownat(parent, base, h.Uid, h.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown %s: %w", base, err)
		}
	}
	if !symlink {
		// base is a directory or FIFO that apply just checked or made, not
		// a symlink, and nothing else writes the tree, so the path form
		// (which would follow a symlink) is safe here.
		if err := unix.Fchmodat(parent, base, mode, 0); err != nil {
			return fmt.Errorf("chmod %s: %w", base, err)
		}
	}
	return setTimes(parent, base, h)
}

func setTimes(parent int, base string, h *tar.Header) error {
	mt := h.ModTime
	if mt.IsZero() {
		return nil
	}
	at := h.AccessTime
	if at.IsZero() {
		at = mt
	}
	ts := []unix.Timespec{unix.NsecToTimespec(at.UnixNano()), unix.NsecToTimespec(mt.UnixNano())}
	if err := unix.UtimesNanoAt(parent, base, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times of %s: %w", base, err)
	}
	return nil
}

// whiteout deletes e.path as written by lower layers.
func (t *tree) whiteout(e entry) error {
	if t.layer[e.path] {
		return nil // same layer: the entry wins
	}
	parent, err := t.openDir(e.dir, false)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	if err := removeAt(parent, e.base); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("whiteout %s: %w", e.path, err)
	}
	return nil
}

// opaque empties directory e.path of everything lower layers put there.
func (t *tree) opaque(e entry) error {
	d, err := t.openDir(e.path, true)
	if err != nil {
		return err
	}
	defer unix.Close(d)
	names, err := readDirNames(d)
	if err != nil {
		return fmt.Errorf("opaque %s: %w", e.path, err)
	}
	for _, n := range names {
		if t.layer[joinPath(e.path, n)] {
			continue
		}
		if err := removeAt(d, n); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("opaque %s: %w", e.path, err)
		}
	}
	return nil
}

// resolveFlags keep a lookup below the start directory and refuse any
// symlink on the way, including ones in the tree being written.
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// openDir opens directory dir (relative, clean; "" is the root) below the
// root, creating missing directories (0755, root-owned) when create is set.
func (t *tree) openDir(dir string, create bool) (int, error) {
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveFlags}
	if dir == "" {
		dir = "."
	}
	fd, err := openat2(t.root, dir, how)
	if err == nil || !errors.Is(err, unix.ENOENT) || !create {
		return fd, dirError(dir, err)
	}
	cur, err := unix.Dup(t.root)
	if err != nil {
		return -1, err
	}
	for elem := range strings.SplitSeq(dir, "/") {
		next, err := openat2(cur, elem, how)
		if errors.Is(err, unix.ENOENT) {
			if err = unix.Mkdirat(cur, elem, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = openat2(cur, elem, how)
			}
		}
		unix.Close(cur)
		if err != nil {
			return -1, dirError(dir, err)
		}
		cur = next
	}
	return cur, nil
}

func dirError(dir string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("%q: path goes through a symlink: %w", dir, ErrUnsafeLayer)
	case errors.Is(err, unix.EXDEV):
		return fmt.Errorf("%q: path leaves the root: %w", dir, ErrUnsafeLayer)
	case errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%q: a parent is not a directory: %w", dir, ErrUnsafeLayer)
	}
	return fmt.Errorf("open %q: %w", dir, err)
}

func openat2(dirfd int, path string, how *unix.OpenHow) (int, error) {
	for {
		fd, err := unix.Openat2(dirfd, path, how)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		return fd, err
	}
}

// removeAt removes name in dirfd and, for a directory, everything in it,
// never following symlinks.
func removeAt(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || !(errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EPERM)) {
		return err
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	names, err := readDirNames(fd)
	if err == nil {
		for _, n := range names {
			if err = removeAt(fd, n); err != nil && !errors.Is(err, unix.ENOENT) {
				break
			}
			err = nil
		}
	}
	unix.Close(fd)
	if err != nil {
		return err
	}
	return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}

// readDirNames lists directory fd (an O_PATH or O_RDONLY descriptor).
func readDirNames(fd int) ([]string, error) {
	rd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(rd), "dir")
	defer f.Close()
	return f.Readdirnames(-1)
}
