package memfile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/runtime/vm/image"
	"github.com/moatsh/moat/internal/sparse"
)

// Spares are a template snapshot's per-sandbox files made ahead of the
// creates that need them: a sparse copy of the snapshot's memory file,
// already written back to disk, and a qcow2 overlay of its disk. A create
// renames a spare's two files into its sandbox directory instead of
// copying ~100+ MiB on its critical path, and its memory file starts with
// no dirty pages, so that its first pause writes only what the guest
// changed since the restore (a fresh copy would leave the whole template
// image to be written back by the pause).
//
// Spares live in <vm>/spares/<instance>/<n>/ of this Runtime; they are
// files only (no process, network or cgroup) and are never handed to a
// sandbox unless the snapshot's memory file is still the one they were
// copied from. Recover removes every other instance's spares.

// DefaultSpares is how many spares each template snapshot keeps.
const DefaultSpares = 2

// spareSnapshots is how many template snapshots keep spares at once (the
// least recently used ones lose theirs).
const spareSnapshots = 4

// spareDelay is how long a refill waits after the create that started it
// (a variable for tests).
var spareDelay = time.Second

// Spares is the Runtime's spares.
type Spares struct {
	log  *slog.Logger
	dir  string // <vm>/spares/<instance>
	want int    // spares per snapshot; 0 disables them

	mu    sync.Mutex
	seq   int                  // guarded by mu
	ready map[string][]spare   // snapshot dir → spares; guarded by mu
	used  map[string]time.Time // snapshot dir → last take; guarded by mu
	busy  map[string]bool      // snapshot dir → a refill runs; guarded by mu
	work  chan struct{}        // one refill at a time, whatever the snapshot
	stamp func(string) (fileStamp, error)

	stop chan struct{}  // closed by Close (under mu): refills end
	wg   sync.WaitGroup // the refill goroutines
}

// spare is one made spare.
type spare struct {
	dir  string
	from fileStamp // of the snapshot's memory file it was copied from
}

// fileStamp identifies one version of a file.
type fileStamp struct{ dev, ino, size, mtime int64 }

func stampOf(path string) (fileStamp, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileStamp{}, err
	}
	return fileStamp{int64(st.Dev), int64(st.Ino), st.Size, st.Mtim.Nano()}, nil
}

func NewSpares(log *slog.Logger, vmDir string, want int) *Spares {
	inst := strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	return &Spares{log: log, dir: filepath.Join(vmDir, "spares", inst), want: want,
		ready: map[string][]spare{}, used: map[string]time.Time{}, busy: map[string]bool{},
		work: make(chan struct{}, 1), stamp: stampOf, stop: make(chan struct{})}
}

// Close ends the background refills, waits for them and removes this
// instance's spares. Take hands out nothing after it. A nil set is fine.
func (s *Spares) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	if !s.closedLocked() {
		close(s.stop)
	}
	s.ready = map[string][]spare{}
	s.mu.Unlock()
	s.wg.Wait()
	return os.RemoveAll(s.dir)
}

// closedLocked reports whether Close was called. s.mu is held.
func (s *Spares) closedLocked() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// Take moves a spare of snap into dir (mem and disk.qcow2) and reports
// whether it did; either way it refills snap's spares in the background.
// A nil set has no spares.
func (s *Spares) Take(snap Source, dir string) bool {
	if s == nil || s.want <= 0 || snap.Fork {
		return false
	}
	defer s.refill(snap)
	cur, err := s.stamp(snap.mem())
	if err != nil {
		return false
	}
	for {
		s.mu.Lock()
		s.used[snap.Dir] = time.Now()
		list := s.ready[snap.Dir]
		if len(list) == 0 {
			s.mu.Unlock()
			return false
		}
		sp := list[len(list)-1]
		s.ready[snap.Dir] = list[:len(list)-1]
		s.mu.Unlock()
		if sp.from == cur && moveSpare(sp.dir, dir) == nil {
			return true
		}
		_ = os.RemoveAll(sp.dir) // a rebuilt snapshot's, or half moved
	}
}

// moveSpare renames spare src's files into the sandbox directory dst.
func moveSpare(src, dst string) error {
	for _, f := range []string{"mem", "disk.qcow2"} {
		if err := os.Rename(filepath.Join(src, f), filepath.Join(dst, f)); err != nil {
			for _, g := range []string{"mem", "disk.qcow2"} {
				_ = os.Remove(filepath.Join(dst, g))
			}
			return fmt.Errorf("take spare: %w", err)
		}
	}
	return os.RemoveAll(src)
}

// refill makes snap's spares up to want, in the background.
func (s *Spares) refill(snap Source) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closedLocked() || s.busy[snap.Dir] || len(s.ready[snap.Dir]) >= s.want {
		return
	}
	s.busy[snap.Dir] = true
	s.evictLocked(snap.Dir)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.busy, snap.Dir)
			s.mu.Unlock()
		}()
		// The create that took a spare is still starting its guest: let
		// it have the CPU and disk first, and stay in the background
		// after (this goroutine's thread ends with it).
		select {
		case <-time.After(spareDelay):
		case <-s.stop:
			return
		}
		lowPriorityThread()
		for {
			s.mu.Lock()
			n, closed := len(s.ready[snap.Dir]), s.closedLocked()
			s.mu.Unlock()
			if n >= s.want || closed {
				return
			}
			s.work <- struct{}{}
			sp, err := s.make(snap)
			<-s.work
			if err != nil {
				s.log.Warn("spare sandbox files", "snapshot", snap.Dir, "err", err)
				return
			}
			s.mu.Lock()
			_, wanted := s.used[snap.Dir] // else evicted or closed meanwhile
			wanted = wanted && !s.closedLocked()
			if wanted {
				s.ready[snap.Dir] = append(s.ready[snap.Dir], sp)
			}
			s.mu.Unlock()
			if !wanted {
				_ = os.RemoveAll(sp.dir)
				return
			}
		}
	}()
}

// evictLocked drops the spares of snapshots that are gone (template GC
// removed them) and of the least recently used snapshots beyond
// spareSnapshots, keeping keep's. s.mu is held.
func (s *Spares) evictLocked(keep string) {
	for d := range s.used {
		if _, err := os.Stat(filepath.Join(d, "mem")); errors.Is(err, os.ErrNotExist) && d != keep {
			s.dropLocked(d)
		}
	}
	for len(s.used) > spareSnapshots {
		oldest := ""
		for d, t := range s.used {
			if d != keep && (oldest == "" || t.Before(s.used[oldest])) {
				oldest = d
			}
		}
		s.dropLocked(oldest)
	}
}

// dropLocked removes snapshot dir's spares. s.mu is held.
func (s *Spares) dropLocked(dir string) {
	for _, sp := range s.ready[dir] {
		_ = os.RemoveAll(sp.dir)
	}
	delete(s.ready, dir)
	delete(s.used, dir)
}

// make copies snap's memory file, writes it back to disk and layers an
// overlay over snap's disk, in a new spare directory.
func (s *Spares) make(snap Source) (_ spare, retErr error) {
	from, err := s.stamp(snap.mem())
	if err != nil {
		return spare{}, err
	}
	s.mu.Lock()
	s.seq++
	dir := filepath.Join(s.dir, strconv.Itoa(s.seq))
	s.mu.Unlock()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return spare{}, err
	}
	defer func() {
		if retErr != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	mem := filepath.Join(dir, "mem")
	if _, err := sparse.Copy(snap.mem(), mem); err != nil {
		return spare{}, err
	}
	if err := image.Qcow2Overlay(context.Background(), snap.disk(), "qcow2", filepath.Join(dir, "disk.qcow2")); err != nil {
		return spare{}, err
	}
	if err := SyncFiles(mem); err != nil {
		return spare{}, err
	}
	if cur, err := s.stamp(snap.mem()); err != nil || cur != from {
		return spare{}, errors.New("snapshot changed while copying")
	}
	return spare{dir: dir, from: from}, nil
}

// RemoveOthers removes the spares of every other Runtime instance left by
// an earlier process. Those of other instances in this process (tests run
// several Runtimes on one data dir) are alive: their refills may still be
// writing, and their Close removes them.
func (s *Spares) RemoveOthers() error {
	if s == nil {
		return nil
	}
	parent := filepath.Dir(s.dir)
	entries, err := os.ReadDir(parent)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("spares: %w", err)
	}
	var errs []error
	ours := strconv.Itoa(os.Getpid()) + "-"
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ours) {
			errs = append(errs, os.RemoveAll(filepath.Join(parent, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// StartWriteback starts writing path's dirty pages back without waiting,
// so that a pause soon after does not have to (best effort).
func StartWriteback(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	_ = unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
}

// lowPriorityThread locks the calling goroutine to its OS thread for good
// (the thread exits with it) and gives that thread the lowest CPU and the
// idle I/O priority (best effort).
func lowPriorityThread() {
	goruntime.LockOSThread()
	tid := unix.Gettid()
	_ = unix.Setpriority(unix.PRIO_PROCESS, tid, 19)
	const ioprioClassIdle, ioprioWhoProcess = 3, 1
	_, _, _ = unix.Syscall(unix.SYS_IOPRIO_SET, ioprioWhoProcess, uintptr(tid), ioprioClassIdle<<13)
}

// Source is the snapshot directory spares are made from: its memory file
// (mem) and disk (disk.qcow2). Fork: the disk is a sandbox's own overlay,
// which a restore copies, so such snapshots get no spares.
type Source struct {
	Dir  string
	Fork bool
}

func (s Source) mem() string  { return filepath.Join(s.Dir, "mem") }
func (s Source) disk() string { return filepath.Join(s.Dir, "disk.qcow2") }
