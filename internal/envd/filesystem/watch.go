package filesystem

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/api/envd/filesystem"
	"github.com/moatsh/moat/internal/errdefs"
)

// Magic numbers (statfs f_type) of file systems whose changes may come from
// elsewhere, where inotify misses events; watching them needs consent.
var networkFSMagic = map[uint32]string{
	0x6969:     "nfs",
	0xFF534D42: "cifs",
	0x517B:     "smb",
	0xFE534D42: "smb2",
	0x65735546: "fuse",
}

// checkWatchable validates the directory a watcher would watch.
func checkWatchable(dir string, allowNetwork bool) error {
	fi, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, unix.ENOTDIR) {
			err = fs.ErrNotExist
		}
		return osError("stat", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("path %s is not a directory: %w", dir, errdefs.ErrInvalidArgument)
	}
	if allowNetwork {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return osError("statfs", dir, err)
	}
	if name, ok := networkFSMagic[uint32(st.Type)]; ok {
		return fmt.Errorf("cannot watch %s: it is on a network file system (%s); set allow_network_mounts to watch it anyway: %w",
			dir, name, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// dirWatcher turns inotify events under one directory into envd's
// FilesystemEvents; recursive ones also watch every subdirectory, including
// those created later.
type dirWatcher struct {
	root         string
	recursive    bool
	includeEntry bool
	fsw          *fsnotify.Watcher
	log          *slog.Logger
	closeOnce    sync.Once
}

func newDirWatcher(root string, recursive, includeEntry bool, log *slog.Logger) (*dirWatcher, error) {
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("create watcher: %w: %w", errdefs.ErrResourceExhausted, err)
	}
	w := &dirWatcher{root: root, recursive: recursive, includeEntry: includeEntry, fsw: fsw, log: log}
	if err := fsw.Add(root); err != nil {
		fsw.Close()
		return nil, watchAddError(root, err)
	}
	if recursive {
		if err := w.addTree(root); err != nil {
			fsw.Close()
			return nil, err
		}
	}
	return w, nil
}

func watchAddError(dir string, err error) error {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EMFILE) {
		return fmt.Errorf("watch %s: inotify limit reached: %w: %w", dir, errdefs.ErrResourceExhausted, err)
	}
	return osError("watch", dir, err)
}

// addTree watches every directory below dir (not following symlinks).
// Directories that vanish or cannot be read meanwhile are skipped.
func (w *dirWatcher) addTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() && p != dir {
				return fs.SkipDir
			}
			return nil
		}
		if !d.IsDir() || p == w.root {
			return nil
		}
		if err := w.fsw.Add(p); err != nil {
			if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EMFILE) {
				return watchAddError(p, err)
			}
			return fs.SkipDir // vanished or unreadable
		}
		return nil
	})
}

// Close stops the watcher; its event channels close.
func (w *dirWatcher) Close() {
	w.closeOnce.Do(func() { _ = w.fsw.Close() })
}

var eventOps = []struct {
	op  fsnotify.Op
	typ filesystem.EventType
}{
	{fsnotify.Create, filesystem.EventType_EVENT_TYPE_CREATE},
	{fsnotify.Write, filesystem.EventType_EVENT_TYPE_WRITE},
	{fsnotify.Remove, filesystem.EventType_EVENT_TYPE_REMOVE},
	{fsnotify.Rename, filesystem.EventType_EVENT_TYPE_RENAME},
	{fsnotify.Chmod, filesystem.EventType_EVENT_TYPE_CHMOD},
}

// convert turns one inotify event into one FilesystemEvent per operation,
// and starts watching directories created under a recursive watcher.
func (w *dirWatcher) convert(ev fsnotify.Event) []*filesystem.FilesystemEvent {
	if w.recursive && ev.Has(fsnotify.Create) {
		if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
			if err := w.fsw.Add(ev.Name); err == nil {
				if err := w.addTree(ev.Name); err != nil {
					w.log.Warn("watch new directory", "path", ev.Name, "error", err)
				}
			}
		}
	}
	if w.recursive && ev.Has(fsnotify.Rename) && ev.Name != w.root {
		// A directory moved away keeps its inotify watch under the old name;
		// drop it (a move within the tree arrives as a Create and re-adds it).
		_ = w.fsw.Remove(ev.Name)
	}
	name, err := filepath.Rel(w.root, ev.Name)
	if err != nil {
		name = ev.Name
	}
	var out []*filesystem.FilesystemEvent
	for _, o := range eventOps {
		if !ev.Has(o.op) {
			continue
		}
		fe := &filesystem.FilesystemEvent{Name: name, Type: o.typ}
		if w.includeEntry && o.op != fsnotify.Remove && o.op != fsnotify.Rename {
			if e, err := EntryInfo(ev.Name); err == nil {
				fe.Entry = e
			}
		}
		out = append(out, fe)
	}
	return out
}
