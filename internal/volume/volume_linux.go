package volume

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/hostfs"
)

// Manager creates, mounts and removes volume images. Safe for concurrent
// use.
type Manager struct {
	dir string // <data>/volumes

	mu      sync.Mutex
	users   map[string]int  // volume ID -> current holders
	mounted map[string]bool // volume IDs mounted on the host
}

// New keeps volumes in <dataDir>/volumes. Mounts a previous server left
// are adopted: reused by Acquire, unmounted by Close if nothing holds them
// by then.
func New(dataDir string) (*Manager, error) {
	m := &Manager{dir: filepath.Join(dataDir, "volumes"), users: map[string]int{}, mounted: map[string]bool{}}
	if err := os.MkdirAll(m.dir, 0o700); err != nil {
		return nil, fmt.Errorf("volumes dir: %w", err)
	}
	ents, err := os.ReadDir(m.dir)
	if err != nil {
		return nil, fmt.Errorf("volumes dir: %w", err)
	}
	for _, e := range ents {
		if idRE.MatchString(e.Name()) && mounted(filepath.Join(m.dir, e.Name(), "mnt")) {
			m.mounted[e.Name()] = true
		}
	}
	return m, nil
}

// Close unmounts the volumes nothing holds. One a sandbox still mounts
// stays mounted, and the next server reuses that mount (see Acquire).
func (m *Manager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for id := range m.mounted {
		if m.users[id] > 0 {
			continue
		}
		if err := unix.Unmount(filepath.Join(m.dir, id, "mnt"), 0); err != nil {
			errs = append(errs, fmt.Errorf("unmount volume %s: %w", id, err))
			continue
		}
		delete(m.mounted, id)
	}
	return errors.Join(errs...)
}

var idRE = regexp.MustCompile(`^[a-z0-9]{1,64}$`)

const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// NewID returns a random volume ID.
func NewID() string {
	b := make([]byte, 20)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return string(b)
}

// NewToken returns a random volume content token.
func NewToken() string { return "vt_" + rand.Text() }

func (m *Manager) path(id string, parts ...string) (string, error) {
	if !idRE.MatchString(id) {
		return "", errdefs.Publicf(errdefs.ErrNotFound, "volume %q not found", id)
	}
	return filepath.Join(append([]string{m.dir, id}, parts...)...), nil
}

// Create makes volume id's image: a sparse file of sizeMB MiB holding an
// empty ext4 filesystem (journaled: a volume outlives crashes; no blocks
// reserved for root) whose root directory is owner's (uid:gid, for the
// sandbox user) with mode 0755.
func (m *Manager) Create(ctx context.Context, id string, sizeMB int, owner string) error {
	dir, err := m.path(id)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "mnt"), 0o700); err != nil {
		return fmt.Errorf("create volume %s: %w", id, err)
	}
	img := filepath.Join(dir, "image.ext4")
	f, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create volume %s: %w", id, err)
	}
	err = f.Truncate(int64(sizeMB) << 20)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		var out []byte
		out, err = exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-m", "0",
			"-E", "lazy_itable_init=1,nodiscard,root_owner="+owner, img).CombinedOutput()
		if err != nil {
			err = fmt.Errorf("mkfs.ext4: %w: %s", err, strings.TrimSpace(string(out)))
		}
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("create volume %s: %w", id, err)
	}
	return nil
}

// Remove deletes volume id's image, freeing its space, after commit (the
// record's removal) succeeds; a volume in use is errdefs.ErrConflict and
// commit is not called.
func (m *Manager) Remove(ctx context.Context, id string, commit func(context.Context) error) error {
	dir, err := m.path(id)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	inUse := errdefs.Publicf(errdefs.ErrConflict,
		"volume %s is in use (mounted by a sandbox or being accessed): kill the sandboxes that mount it first", id)
	if m.users[id] > 0 {
		return inUse
	}
	if mnt := filepath.Join(dir, "mnt"); m.mounted[id] || mounted(mnt) {
		if err := unix.Unmount(mnt, 0); err != nil {
			if errors.Is(err, unix.EBUSY) {
				return inUse
			}
			return fmt.Errorf("remove volume %s: unmount: %w", id, err)
		}
		delete(m.mounted, id)
	}
	if err := commit(ctx); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove volume %s: %w", id, err)
	}
	return nil
}

// Acquire returns the path of volume id's host mount, mounting it on
// first use; release (idempotent) gives it back. The mount then stays
// until Remove or Close: one filesystem instance per image for the
// server's life, never a second mount of an image whose first one a
// sandbox may still hold (two ext4 instances on one image would corrupt
// it). A mount a previous server left (its sandboxes survived it) is
// reused.
func (m *Manager) Acquire(id string) (root string, release func(), err error) {
	dir, err := m.path(id)
	if err != nil {
		return "", nil, err
	}
	mnt := filepath.Join(dir, "mnt")
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.mounted[id] && !mounted(mnt) {
		img := filepath.Join(dir, "image.ext4")
		if _, err := os.Stat(img); errors.Is(err, os.ErrNotExist) {
			return "", nil, errdefs.Publicf(errdefs.ErrNotFound, "volume %s has no image", id)
		}
		if err := hostfs.LoopMount(img, mnt, "ext4", unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
			return "", nil, fmt.Errorf("mount volume %s: %w", id, err)
		}
	}
	m.mounted[id] = true
	m.users[id]++
	var once sync.Once
	return mnt, func() { once.Do(func() { m.release(id) }) }, nil
}

func (m *Manager) release(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.users[id]--; m.users[id] <= 0 {
		delete(m.users, id)
	}
}

// Users returns how many holders volume id has.
func (m *Manager) Users(id string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.users[id]
}

// Usage returns the used and total bytes of volume id's filesystem and of
// its image on the host (allocated blocks); the volume must be held.
func Usage(root string) (used, total uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", root, err)
	}
	bs := uint64(st.Bsize)
	return (st.Blocks - st.Bfree) * bs, st.Blocks * bs, nil
}

// mounted reports whether p is a mount point (its device differs from its
// parent's).
func mounted(p string) bool {
	var a, b unix.Stat_t
	if unix.Lstat(p, &a) != nil || unix.Lstat(filepath.Dir(p), &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}
