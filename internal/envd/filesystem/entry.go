package filesystem

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/moatsh/moat/api/envd/filesystem"
	"github.com/moatsh/moat/internal/envd/users"
	"github.com/moatsh/moat/internal/envd/xattrmeta"
	"github.com/moatsh/moat/internal/errdefs"
)

// EntryInfo describes the file at the absolute path path as envd does: the
// lstat permissions string, owner and times of the entry itself; for a
// symlink the fully resolved target and the target's type and mode bits
// (FILE_TYPE_UNSPECIFIED and 0 if it dangles), as E2B's envd reports them. A missing path is an error of kind errdefs.ErrNotFound.
func EntryInfo(path string) (*filesystem.EntryInfo, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			err = fs.ErrNotExist
		}
		return nil, osError("stat", path, err)
	}
	return entryFromInfo(path, fi), nil
}

// entryFromInfo builds the EntryInfo of path from its lstat result fi.
func entryFromInfo(path string, fi fs.FileInfo) *filesystem.EntryInfo {
	e := &filesystem.EntryInfo{
		Name:         filepath.Base(path),
		Type:         fileType(fi.Mode()),
		Path:         path,
		Size:         fi.Size(),
		Mode:         uint32(fi.Mode().Perm()),
		Permissions:  fi.Mode().String(),
		ModifiedTime: timestamppb.New(fi.ModTime()),
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner = names.user(st.Uid)
		e.Group = names.group(st.Gid)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, typ, perm := resolveSymlink(path)
		e.SymlinkTarget = &target
		e.Type = typ
		e.Mode = uint32(perm)
	}
	// Best effort, as in E2B: the entry is valid without it. It follows a
	// symlink, so a link reports its target's metadata.
	e.Metadata, _ = xattrmeta.Read(path)
	return e
}

func fileType(m fs.FileMode) filesystem.FileType {
	switch {
	case m.IsDir():
		return filesystem.FileType_FILE_TYPE_DIRECTORY
	case m&fs.ModeSymlink != 0:
		return filesystem.FileType_FILE_TYPE_SYMLINK
	default:
		return filesystem.FileType_FILE_TYPE_FILE
	}
}

// resolveSymlink returns the fully resolved target of the symlink at path,
// the type of what it points to and its permission bits. A dangling link
// (or a loop) yields its immediate target, made absolute,
// FILE_TYPE_UNSPECIFIED and 0.
func resolveSymlink(path string) (string, filesystem.FileType, fs.FileMode) {
	if target, err := filepath.EvalSymlinks(path); err == nil {
		if abs, err := filepath.Abs(target); err == nil {
			target = abs
		}
		if fi, err := os.Stat(target); err == nil {
			return target, fileType(fi.Mode()), fi.Mode().Perm()
		}
		return target, filesystem.FileType_FILE_TYPE_UNSPECIFIED, 0
	}
	target, err := os.Readlink(path)
	if err != nil {
		return "", filesystem.FileType_FILE_TYPE_UNSPECIFIED, 0
	}
	if !filepath.IsAbs(target) {
		target = filepath.Join(filepath.Dir(path), target)
	}
	return filepath.Clean(target), filesystem.FileType_FILE_TYPE_UNSPECIFIED, 0
}

// Chown gives path (not following a final symlink) to u, unless u is the
// account envd runs as, in which case new files already belong to it.
func Chown(path string, u *users.User) error {
	if u == nil || u.IsCurrent() {
		return nil
	}
	if err := os.Lchown(path, int(u.UID), int(u.GID)); err != nil {
		return fmt.Errorf("chown %s to %s: %w", path, u.Name, osKind(err))
	}
	return nil
}

// osKind returns err with an errdefs kind attached when it has a clear one.
func osKind(err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %w", errdefs.ErrNotFound, err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w: %w", errdefs.ErrPermissionDenied, err)
	}
	return err
}

// nameCache caches uid/gid → name lookups for a short while, so that listing
// a large directory reads the account database once, not twice per entry.
type nameCache struct {
	mu     sync.Mutex
	users  map[uint32]cachedName
	groups map[uint32]cachedName
}

type cachedName struct {
	name    string
	expires time.Time
}

const nameTTL = 10 * time.Second

var names = &nameCache{users: map[uint32]cachedName{}, groups: map[uint32]cachedName{}}

func (c *nameCache) user(uid uint32) string  { return c.get(c.users, uid, users.NameOfUID) }
func (c *nameCache) group(gid uint32) string { return c.get(c.groups, gid, users.NameOfGID) }

func (c *nameCache) get(m map[uint32]cachedName, id uint32, lookup func(uint32) string) string {
	now := time.Now()
	c.mu.Lock()
	if n, ok := m[id]; ok && now.Before(n.expires) {
		c.mu.Unlock()
		return n.name
	}
	c.mu.Unlock()
	name := lookup(id)
	c.mu.Lock()
	if len(m) > 4096 {
		clear(m)
	}
	m[id] = cachedName{name: name, expires: now.Add(nameTTL)}
	c.mu.Unlock()
	return name
}
