package filesystem

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"connectrpc.com/connect"

	"github.com/moatsh/moat/api/envd/filesystem"
	"github.com/moatsh/moat/internal/envd/users"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errconnect"
)

// Stat describes one file; a missing one is not_found.
func (s *Service) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	p, _, err := s.resolve(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, errconnect.ToConnect(err)
	}
	e, err := EntryInfo(p)
	if err != nil {
		return nil, errconnect.ToConnect(err)
	}
	return connect.NewResponse(&filesystem.StatResponse{Entry: e}), nil
}

// MakeDir creates a directory and its missing parents for the user.
func (s *Service) MakeDir(ctx context.Context, req *connect.Request[filesystem.MakeDirRequest]) (*connect.Response[filesystem.MakeDirResponse], error) {
	p, u, err := s.resolve(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, errconnect.ToConnect(err)
	}
	if err := makeDir(p, u); err != nil {
		return nil, errconnect.ToConnect(err)
	}
	e, err := EntryInfo(p)
	if err != nil {
		return nil, errconnect.ToConnect(err)
	}
	return connect.NewResponse(&filesystem.MakeDirResponse{Entry: e}), nil
}

// makeDir creates dir: already_exists when it is a directory (or a symlink
// to one), invalid_argument when it is something else.
func makeDir(dir string, u *users.User) error {
	if fi, err := os.Stat(dir); err == nil {
		if fi.IsDir() {
			return fmt.Errorf("directory already exists: %s: %w", dir, errdefs.ErrAlreadyExists)
		}
		return fmt.Errorf("path already exists but is not a directory: %s: %w", dir, errdefs.ErrInvalidArgument)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return osError("stat", dir, err)
	}
	created, err := ensureDirs(dir, u)
	if err != nil {
		return err
	}
	if !created {
		return fmt.Errorf("directory already exists: %s: %w", dir, errdefs.ErrAlreadyExists)
	}
	return nil
}

// ensureDirs creates dir and every missing parent with mode 0755, each
// chowned to u. created reports whether dir itself was made by this call.
func ensureDirs(dir string, u *users.User) (created bool, err error) {
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return false, fmt.Errorf("not a directory: %s: %w", dir, errdefs.ErrInvalidArgument)
		}
		return false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return false, osError("stat", dir, err)
	}
	if parent := filepath.Dir(dir); parent != dir {
		if _, err := ensureDirs(parent, u); err != nil {
			return false, err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			// Lost a race with another creator; fine if it made a directory.
			if fi, serr := os.Stat(dir); serr == nil && fi.IsDir() {
				return false, nil
			}
		}
		return false, osError("create directory", dir, err)
	}
	if err := Chown(dir, u); err != nil {
		return true, err
	}
	return true, nil
}

// Move renames source to destination, creating the destination's parents.
func (s *Service) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	src, u, err := s.resolve(req.Header(), req.Msg.GetSource())
	if err != nil {
		return nil, errconnect.ToConnect(err)
	}
	dst, _, err := s.resolve(req.Header(), req.Msg.GetDestination())
	if err != nil {
		return nil, errconnect.ToConnect(err)
	}
	if _, err := os.Lstat(src); err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			err = fs.ErrNotExist
		}
		return nil, errconnect.ToConnect(osError("stat source", src, err))
	}
	if _, err := ensureDirs(filepath.Dir(dst), u); err != nil {
		return nil, errconnect.ToConnect(fmt.Errorf("create destination parent: %w", err))
	}
	if err := os.Rename(src, dst); err != nil {
		return nil, errconnect.ToConnect(osError("move "+src+" to", dst, err))
	}
	e, err := EntryInfo(dst)
	if err != nil {
		return nil, errconnect.ToConnect(err)
	}
	return connect.NewResponse(&filesystem.MoveResponse{Entry: e}), nil
}

// Remove deletes a path recursively; a missing path is not an error.
func (s *Service) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	p, _, err := s.resolve(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, errconnect.ToConnect(err)
	}
	if err := os.RemoveAll(p); err != nil {
		return nil, errconnect.ToConnect(osError("remove", p, err))
	}
	return connect.NewResponse(&filesystem.RemoveResponse{}), nil
}

// ListDir lists a directory up to depth levels (0 means 1), root excluded.
func (s *Service) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	p, _, err := s.resolve(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, errconnect.ToConnect(err)
	}
	entries, err := listDir(ctx, p, max(int(req.Msg.GetDepth()), 1))
	if err != nil {
		return nil, errconnect.ToConnect(err)
	}
	return connect.NewResponse(&filesystem.ListDirResponse{Entries: entries}), nil
}

// dirRoot checks that p is (or links to) a directory and returns its fully
// resolved form.
func dirRoot(p string) (string, error) {
	fi, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			err = fs.ErrNotExist
		}
		if errors.Is(err, syscall.ELOOP) {
			return "", fmt.Errorf("symlink loop at %s: %w", p, errdefs.ErrFailedPrecondition)
		}
		return "", osError("stat", p, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("path is not a directory: %s: %w", p, errdefs.ErrInvalidArgument)
	}
	resolved, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", osError("resolve", p, err)
	}
	return resolved, nil
}

// listDir walks root (following it if it is a symlink, but no symlinks below
// it) down to depth levels. Paths in the result are under the requested root.
func listDir(ctx context.Context, root string, depth int) ([]*filesystem.EntryInfo, error) {
	resolved, err := dirRoot(root)
	if err != nil {
		return nil, err
	}
	entries := []*filesystem.EntryInfo{}
	err = filepath.WalkDir(resolved, func(path string, d fs.DirEntry, werr error) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if path == resolved {
			if werr != nil {
				return osError("read directory", root, werr)
			}
			return nil
		}
		if werr != nil {
			// An unreadable subdirectory or a vanished entry: list what we can.
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(resolved, path)
		if err != nil {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil // vanished since the directory was read
		}
		e := entryFromInfo(path, fi)
		e.Path = filepath.Join(root, rel)
		entries = append(entries, e)
		if d.IsDir() && strings.Count(rel, string(filepath.Separator))+1 >= depth {
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return entries, nil
}
