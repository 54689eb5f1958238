package idmap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// Size is how many IDs a sandbox gets: 0..Size-1 inside.
const Size = 1 << 16

// FirstHost is the first host ID handed out; the ranges stay clear of the
// IDs of host accounts and of /etc/subuid's usual 100000+ ranges.
const FirstHost = 1 << 30

// maxSlots keeps every range below 2^32-1 (the invalid ID).
const maxSlots = (1<<32 - FirstHost) / Size

// Range maps IDs 0..Size-1 inside a sandbox to Host..Host+Size-1 outside.
type Range struct {
	Host uint32
}

// Root is the host ID of root inside the sandbox.
func (r Range) Root() int { return int(r.Host) }

// Mappings is the range as an OCI uidMappings/gidMappings list.
func (r Range) Mappings() []specs.LinuxIDMapping {
	return []specs.LinuxIDMapping{{ContainerID: 0, HostID: r.Host, Size: Size}}
}

// Contains reports whether the host ID id belongs to the range.
func (r Range) Contains(id uint32) bool { return id >= r.Host && id-r.Host < Size }

// fileName is where a sandbox directory records its range.
const fileName = "idmap"

// Allocator hands out ranges to sandbox directories under one parent
// directory, recording each in <dir>/idmap so that a restarted server (or
// Recover) sees which ranges are taken. Safe for concurrent use.
type Allocator struct {
	mu     sync.Mutex
	parent string
	also   []string // more parents whose directories' ranges count as taken
	first  uint32   // the first slot handed out (FromSlot)
	// seen caches the range recorded in each sandbox directory read
	// before (a range file is written once and never changed), so that an
	// allocation reads only the directories that are new since the last
	// one: reading every sandbox's file was O(sandboxes) per create.
	// Guarded by mu.
	seen map[string]uint32
}

// NewAllocator allocates for the sandbox directories under parent. Ranges
// recorded in the directories under each of also (another runtime's
// sandboxes) count as taken too, so that no two sandboxes of either share
// a range. An allocation holds an exclusive flock on parent and on each
// existing also directory (in path order), so allocators of the same
// directories in this or another process never hand out one range twice:
// give both runtimes of a data dir each other's parent as also.
func NewAllocator(parent string, also ...string) *Allocator {
	return &Allocator{parent: parent, also: also}
}

// FromSlot makes a hand out ranges from slot first on (0: FirstHost), so
// that allocators of different data dirs (test scopes) stay apart. It
// returns a.
func (a *Allocator) FromSlot(first uint32) *Allocator {
	a.first = min(first, maxSlots-1)
	return a
}

// Allocate picks the lowest free range and records it in dir (a direct child
// of the parent, which must exist). Ranges are freed by removing dir.
func (a *Allocator) Allocate(dir string) (Range, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	unlock, err := lockDirs(append([]string{a.parent}, a.also...))
	if err != nil {
		return Range{}, err
	}
	defer unlock()
	if _, err := os.Stat(a.parent); err != nil {
		return Range{}, fmt.Errorf("idmap: %w", err)
	}
	used := map[uint32]bool{}
	seen := map[string]uint32{}
	for _, p := range append([]string{a.parent}, a.also...) {
		entries, _ := os.ReadDir(p) // a missing parent of also has no ranges
		for _, e := range entries {
			dir := filepath.Join(p, e.Name())
			h, ok := a.seen[dir]
			if !ok {
				r, err := Read(dir)
				if err != nil {
					continue
				}
				h = r.Host
			}
			seen[dir] = h
			used[h] = true
		}
	}
	a.seen = seen
	for slot := a.first; slot < maxSlots; slot++ {
		r := Range{Host: FirstHost + slot*Size}
		if used[r.Host] {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, fileName), []byte(strconv.FormatUint(uint64(r.Host), 10)+"\n"), 0o600); err != nil {
			return Range{}, fmt.Errorf("idmap: record range: %w", err)
		}
		return r, nil
	}
	return Range{}, errors.New("idmap: every ID range is in use")
}

// Read returns the range recorded in dir.
func Read(dir string) (Range, error) {
	b, err := os.ReadFile(filepath.Join(dir, fileName))
	if err != nil {
		return Range{}, err
	}
	return Parse(strings.TrimSpace(string(b)))
}

// Parse reads a range's first host ID, refusing what Allocate never writes.
func Parse(s string) (Range, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n < FirstHost || (n-FirstHost)%Size != 0 || (n-FirstHost)/Size >= maxSlots {
		return Range{}, fmt.Errorf("idmap: bad range %q", s)
	}
	return Range{Host: uint32(n)}, nil
}

// lockDirs takes an exclusive flock on each of dirs that exists (the
// first must), in sorted order so that allocators listing the same
// directories in another order cannot deadlock.
func lockDirs(dirs []string) (unlock func(), err error) {
	sorted := make([]string, 0, len(dirs))
	for _, d := range dirs {
		sorted = append(sorted, filepath.Clean(d))
	}
	first := sorted[0]
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	var held []*os.File
	unlock = func() {
		for _, f := range held {
			f.Close() // releases its lock
		}
	}
	for _, d := range sorted {
		f, err := os.OpenFile(d, os.O_RDONLY|syscall.O_DIRECTORY, 0)
		if errors.Is(err, os.ErrNotExist) && d != first {
			continue // a missing parent has no ranges
		}
		if err == nil {
			err = flock(f)
		}
		if err != nil {
			if f != nil {
				f.Close()
			}
			unlock()
			return nil, fmt.Errorf("idmap: lock %s: %w", d, err)
		}
		held = append(held, f)
	}
	return unlock, nil
}

func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
