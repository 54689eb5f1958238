package template

import (
	"errors"
	"fmt"
	"github.com/moatsh/moat/internal/template/catalog"
	"github.com/moatsh/moat/internal/template/rootfs"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
)

// errBusy is a template directory that is in use (a build holds its lock,
// or sandboxes have one of its trees as overlay lower layer).
var errBusy = errors.New("in use")

// RemoveTemplateFiles deletes <DataDir>/templates/<name> unless running
// sandboxes use its rootfs (or a replaced tree kept for them) or a build
// of the name holds its lock (errdefs.ErrFailedPrecondition then).
func RemoveTemplateFiles(dataDir, name string) error {
	if !catalog.ValidName(name) {
		return fmt.Errorf("template name %q: %w", name, errdefs.ErrInvalidArgument)
	}
	if _, err := removeUnused(Layout{DataDir: dataDir}, name); err != nil {
		if errors.Is(err, errBusy) {
			return fmt.Errorf("template %s: %w: %w", name, err, errdefs.ErrFailedPrecondition)
		}
		return err
	}
	return nil
}

// removeUnused removes template name's directory under its lock unless
// one of its trees is an overlay lower layer; it returns the bytes freed.
func removeUnused(lay Layout, name string) (int64, error) {
	dir := lay.TemplateDir(name)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	unlock, ok, err := tryLockFile(lay.LockPath(name))
	if err != nil {
		return 0, fmt.Errorf("template %s: lock: %w", name, err)
	}
	if !ok {
		return 0, fmt.Errorf("a build of it is running: %w", errBusy)
	}
	defer unlock()
	trees, _ := filepath.Glob(filepath.Join(dir, oldDirPattern, "rootfs"))
	for _, t := range append(trees, lay.RootfsDir(name)) {
		inUse, err := rootfs.InUseAsLowerdir(t)
		if err != nil {
			return 0, err
		}
		if inUse {
			return 0, fmt.Errorf("running sandboxes use it: %w", errBusy)
		}
	}
	n := DiskUsage(dir)
	if err := rootfs.RemoveTree(dir); err != nil {
		return 0, err
	}
	return n, nil
}

// RemoveOrphans removes the directories under <DataDir>/templates of
// templates that no longer exist: names not in keep, whose files nobody
// changed for minAge (a build that just installed its rootfs registers it
// a moment later) and that removeUnused may remove. It returns the names
// removed and the bytes freed; busy directories stay for a later run.
func RemoveOrphans(dataDir string, keep map[string]bool, minAge time.Duration, log *slog.Logger) ([]string, int64, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lay := Layout{DataDir: dataDir}
	entries, err := os.ReadDir(filepath.Join(dataDir, "templates"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("template gc: %w", err)
	}
	cutoff := time.Now().Add(-minAge)
	var removed []string
	var freed int64
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || keep[name] || !catalog.ValidName(name) || changedSince(lay.TemplateDir(name), cutoff) {
			continue
		}
		n, err := removeUnused(lay, name)
		switch {
		case errors.Is(err, errBusy):
			log.Debug("deleted template's files kept", "template", name, "why", err)
		case err != nil:
			errs = append(errs, fmt.Errorf("template %s: %w", name, err))
		default:
			removed = append(removed, name)
			freed += n
			log.Info("deleted template's files removed", "template", name, "freed_mib", n>>20)
		}
	}
	return removed, freed, errors.Join(errs...)
}

// changedSince reports whether dir or a file directly in it (stamp, lock,
// build log) or its rootfs changed after t.
func changedSince(dir string, t time.Time) bool {
	paths := []string{dir, filepath.Join(dir, "rootfs")}
	if entries, err := os.ReadDir(dir); err == nil {
		for _, e := range entries {
			paths = append(paths, filepath.Join(dir, e.Name()))
		}
	}
	for _, p := range paths {
		if fi, err := os.Lstat(p); err == nil && fi.ModTime().After(t) {
			return true
		}
	}
	return false
}

// DiskUsage is the space the files under dir take on disk (allocated
// blocks, a file linked twice counted once), like du -s; unreadable parts
// count nothing.
func DiskUsage(dir string) int64 {
	var n int64
	seen := map[fileKey]bool{}
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			n += allocated(fi, seen)
		}
		return nil
	})
	return n
}
