package prune

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/moatsh/moat/internal/runtime/vm/image"
	"github.com/moatsh/moat/internal/runtime/vm/qemu"
)

// Stats says what a prune removed.
type Stats struct {
	Dirs      int   // template directories (templates/<name>-<stamp>) removed
	Snapshots int   // stale snapshot directories removed from current templates
	Bytes     int64 // disk space freed (allocated blocks)
}

// Templates removes the template images (templates/<key> under vmDir, see
// package vm's doc) nothing needs any more: those of templates that are
// gone or were rebuilt (their stamp changed: new rootfs or envd), and,
// inside the directories of current templates, snapshots whose meta lacks
// one of the lines of snapMeta (taken with another guest kernel,
// initramfs (moat-vminit) or image layout; nil: nothing to compare with).
// keep holds the keys of the templates that exist (each keeps the
// directory of its current build); busy holds the keys of templates a
// create is using right now (every directory of theirs, any stamp, is
// kept).
//
// Never removed, whatever the lists say: a directory or snapshot on the
// qcow2 backing chain of a sandbox's disk (running or paused) or of a
// snapshot's disk (Runtime.Snapshot), a directory whose snapshot is still
// being taken (no ReadyFile), and anything modified less than minAge
// ago (package vm touches what it hands out, which covers a create
// between choosing its snapshot and making its overlay). An error reading
// a backing chain stops the prune before anything is removed.
func Templates(ctx context.Context, log *slog.Logger, vmDir string, keep map[string]bool, busy, snapMeta []string, minAge time.Duration) (Stats, error) {
	used, err := chainUsers(vmDir)
	if err != nil {
		return Stats{}, fmt.Errorf("prune templates: %w", err)
	}
	entries, err := os.ReadDir(filepath.Join(vmDir, "templates"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Stats{}, fmt.Errorf("prune templates: %w", err)
	}
	var st Stats
	cutoff := time.Now().Add(-minAge)
	var errs []error
	for _, e := range entries {
		if ctx.Err() != nil {
			break
		}
		dir := filepath.Join(vmDir, "templates", e.Name())
		if !e.IsDir() || hasKeyPrefix(e.Name(), busy) {
			continue
		}
		if keep[e.Name()] {
			errs = append(errs, pruneSnapshots(log, dir, snapMeta, used, cutoff, &st))
			continue
		}
		if !removable(dir, used, cutoff) {
			continue
		}
		n := diskUsage(dir)
		if err := removeTemplateDir(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		st.Dirs++
		st.Bytes += n
		log.InfoContext(ctx, "template image removed", "dir", dir, "freed_mib", n>>20)
	}
	return st, errors.Join(errs...)
}

// hasKeyPrefix reports whether the directory name belongs to one of the
// templates whose keys (any stamp) are given.
func hasKeyPrefix(name string, keys []string) bool {
	for _, k := range keys {
		if i := strings.LastIndexByte(k, '-'); i > 0 && strings.HasPrefix(name, k[:i+1]) {
			return true
		}
	}
	return false
}

// pruneSnapshots removes, from a current template's directory, snapshots
// whose meta lacks a line of snapMeta (another boot (kernel + initramfs)
// or image than package vm would take), and image files of an older layout.
func pruneSnapshots(log *slog.Logger, dir string, snapMeta []string, used fileSet, cutoff time.Time, st *Stats) error {
	if snapMeta == nil {
		return nil // the guest kernel is unknown: nothing to compare with
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		stale := false
		switch {
		case e.IsDir() && strings.HasPrefix(e.Name(), "snap-"):
			stale = isReady(p) && !metaHas(filepath.Join(p, "meta"), snapMeta...)
		case !e.IsDir() && strings.HasSuffix(e.Name(), ".ext4") && e.Name() != image.ImageName:
			stale = true // rootfs.ext4 of an older image layout
		}
		if !stale || used.has(p) || !olderThan(p, cutoff) {
			continue
		}
		n := diskUsage(p)
		if err := removeTemplateDir(p); err != nil {
			errs = append(errs, err)
			continue
		}
		st.Snapshots++
		st.Bytes += n
		log.Info("stale template snapshot removed", "path", p, "freed_mib", n>>20)
	}
	return errors.Join(errs...)
}

// removable reports whether a template directory of no current template
// can go: nothing uses it, no snapshot is being taken in it, nothing in it
// was touched since cutoff.
func removable(dir string, used fileSet, cutoff time.Time) bool {
	if used.has(dir) || !olderThan(dir, cutoff) {
		return false
	}
	snaps, _ := filepath.Glob(filepath.Join(dir, "snap-*"))
	for _, s := range snaps {
		if used.has(s) || !isReady(s) || !olderThan(s, cutoff) {
			return false
		}
	}
	return true
}

// ReadyFile marks a complete snapshot directory.
const ReadyFile = "ready"

func isReady(snapDir string) bool {
	_, err := os.Stat(filepath.Join(snapDir, ReadyFile))
	return err == nil
}

func olderThan(p string, cutoff time.Time) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.ModTime().Before(cutoff)
}

// metaHas reports whether the snapshot meta file has every line of want.
func metaHas(path string, want ...string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	have := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		have[strings.TrimSpace(sc.Text())] = true
	}
	for _, w := range want {
		if !have[w] {
			return false
		}
	}
	return true
}

// removeTemplateDir removes a template directory or snapshot, first
// detaching QEMU log mounts a crashed boot may have left in it.
func removeTemplateDir(p string) error {
	snaps, _ := filepath.Glob(filepath.Join(p, "snap-*"))
	for _, s := range append(snaps, p) {
		_ = qemu.UnmountLog(s)
	}
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return nil
}

// fileSet identifies files and directories by device and inode, so that
// paths spelled differently (relative backing names, symlinked data
// directories) still match.
type fileSet map[[2]uint64]bool

func fileID(p string) ([2]uint64, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		return [2]uint64{}, false
	}
	return [2]uint64{st.Dev, st.Ino}, true
}

func (s fileSet) add(p string) {
	if id, ok := fileID(p); ok {
		s[id] = true
	}
}

func (s fileSet) has(p string) bool {
	id, ok := fileID(p)
	return ok && s[id]
}

// chainUsers collects every file on the backing chains of the sandboxes'
// and snapshots' disks, with the directory holding it and that
// directory's parent (a template snapshot and its template directory).
func chainUsers(vmDir string) (fileSet, error) {
	var disks []string
	for _, pattern := range []string{"sandboxes/*/disk.qcow2", "snapshots/*/disk.qcow2"} {
		m, err := filepath.Glob(filepath.Join(vmDir, pattern))
		if err != nil {
			return nil, err
		}
		disks = append(disks, m...)
	}
	used := fileSet{}
	for _, d := range disks {
		if err := used.addChain(d); err != nil {
			return nil, err
		}
	}
	return used, nil
}

// addChain adds the backing files of disk (and their directories). A
// file that does not exist ends the chain (nothing there to keep); any
// other error reading a header is returned.
func (s fileSet) addChain(disk string) error {
	cur := disk
	for i := 0; i < 8; i++ {
		next, err := image.Qcow2Backing(cur)
		if err != nil {
			if _, serr := os.Stat(cur); errors.Is(serr, fs.ErrNotExist) {
				return nil // the sandbox went away meanwhile, or a broken chain
			}
			return fmt.Errorf("backing chain of %s: %w", disk, err)
		}
		if next == "" {
			return nil
		}
		if !filepath.IsAbs(next) {
			next = filepath.Join(filepath.Dir(cur), next)
		}
		s.add(next)
		s.add(filepath.Dir(next))
		s.add(filepath.Dir(filepath.Dir(next)))
		cur = next
	}
	return fmt.Errorf("backing chain of %s: too long", disk)
}

// diskUsage is the space the files under p take (allocated blocks; a file
// linked twice counts once).
func diskUsage(p string) int64 {
	var n int64
	seen := map[[2]uint64]bool{}
	_ = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			id := [2]uint64{st.Dev, st.Ino}
			if !seen[id] {
				seen[id] = true
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}
