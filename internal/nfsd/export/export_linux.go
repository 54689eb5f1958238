package export

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ErrBadHandle is a handle this server never made (wrong length, version
// or export).
var ErrBadHandle = errors.New("export: malformed file handle")

const (
	handleVersion = 1
	// MaxHandle is NFSv3's bound on a file handle.
	MaxHandle = 64
	// maxNodes bounds the handles an export remembers; past it the map
	// starts over (handles in use are found again by a walk).
	maxNodes = 1 << 20
	// rescanEvery is how often a walk may look for unknown handles.
	rescanEvery = 2 * time.Second
	maxDepth    = 4096
)

// Export is one served directory tree. Safe for concurrent use.
type Export struct {
	Name  string // the path clients mount ("/v0")
	index byte
	root  int // O_PATH descriptor of the tree's root
	fsid  uint64

	mu       sync.Mutex
	nodes    map[string]*node // kernel handle -> where it was last seen; guarded by mu
	rootKey  string
	lastScan time.Time       // guarded by mu
	missing  map[string]bool // keys a walk since lastScan did not find; guarded by mu

	scanMu sync.Mutex // one walk at a time
}

// node is where a handle was last seen: a name in a parent directory
// (nil parent: the export's root).
type node struct {
	key    string // the kernel's handle
	parent *node
	name   string
	dir    bool
}

// Open serves the directory tree root (a descriptor Open takes over) as
// export index of the server under name.
func Open(index int, name string, root *os.File) (*Export, error) {
	if index < 0 || index > 255 {
		return nil, fmt.Errorf("export %s: index %d out of range", name, index)
	}
	fd, err := unix.Openat2(int(root.Fd()), ".", &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC})
	root.Close()
	if err != nil {
		return nil, fmt.Errorf("export %s: open root: %w", name, err)
	}
	key, err := handleKey(fd, "", unix.AT_EMPTY_PATH)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("export %s: root handle: %w", name, err)
	}
	e := &Export{Name: name, index: byte(index), root: fd, fsid: 0x6d6f6174<<16 | uint64(index),
		nodes: map[string]*node{}, rootKey: key, missing: map[string]bool{}}
	e.nodes[key] = &node{key: key, dir: true}
	return e, nil
}

// Close releases the root descriptor.
func (e *Export) Close() error { return unix.Close(e.root) }

// Index is the export's number in its server's handles.
func (e *Export) Index() int { return int(e.index) }

// FSID is the file system ID reported for every file of the export.
func (e *Export) FSID() uint64 { return e.fsid }

// RootHandle is the wire handle of the export's root.
func (e *Export) RootHandle() []byte { return e.wire(e.rootKey) }

// ExportOf returns the export index a wire handle names, or ErrBadHandle.
func ExportOf(fh []byte) (int, error) {
	if len(fh) < 7 || len(fh) > MaxHandle || fh[0] != handleVersion {
		return 0, ErrBadHandle
	}
	return int(fh[1]), nil
}

// wire is the wire handle of kernel handle key: version, export index,
// then the kernel's handle type and bytes.
func (e *Export) wire(key string) []byte {
	out := make([]byte, 0, 2+len(key))
	out = append(out, handleVersion, e.index)
	return append(out, key...)
}

// keyOf is the kernel handle inside wire handle fh of this export.
func (e *Export) keyOf(fh []byte) (string, error) {
	i, err := ExportOf(fh)
	if err != nil || i != int(e.index) {
		return "", ErrBadHandle
	}
	return string(fh[2:]), nil
}

// handleKey is the kernel's handle of path under dirfd (flags: 0 or
// AT_EMPTY_PATH; never AT_SYMLINK_FOLLOW) as a map key.
func handleKey(dirfd int, path string, flags int) (string, error) {
	h, _, err := unix.NameToHandleAt(dirfd, path, flags)
	if err != nil {
		return "", err
	}
	b := binary.BigEndian.AppendUint32(nil, uint32(h.Type()))
	b = append(b, h.Bytes()...)
	if len(b)+2 > MaxHandle {
		return "", fmt.Errorf("kernel file handle of %d bytes: %w", len(b), unix.EOVERFLOW)
	}
	return string(b), nil
}

// path is n's path relative to the root ("" for the root); e.mu is held.
func (n *node) path() (string, bool) {
	var names []string
	for p := n; p.parent != nil; p = p.parent {
		names = append(names, p.name)
		if len(names) > maxDepth {
			return "", false
		}
	}
	for i, j := 0, len(names)-1; i < j; i, j = i+1, j-1 {
		names[i], names[j] = names[j], names[i]
	}
	return strings.Join(names, "/"), true
}

// resolveFlags keep every lookup inside the tree and off symlinks.
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// openAt opens path under dirfd with flags (O_NOFOLLOW and O_CLOEXEC
// added), never following a symlink or leaving dirfd's tree.
func openAt(dirfd int, path string, flags int) (int, error) {
	if path == "" {
		path = "."
	}
	return unix.Openat2(dirfd, path, &unix.OpenHow{Flags: uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC), Resolve: resolveFlags})
}

// file is an open handle: its descriptor and where it is.
type file struct {
	fd  int
	key string
	n   *node
}

func (f *file) close() { unix.Close(f.fd) }

// open resolves wire handle fh and opens it with flags (O_PATH for most
// operations) as c, the current thread's user. A handle not found where
// it was last seen is looked for once (see rescan); ESTALE if it is gone.
func (e *Export) open(c Cred, fh []byte, flags int) (*file, error) {
	key, err := e.keyOf(fh)
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		e.mu.Lock()
		n := e.nodes[key]
		p, ok := "", false
		if n != nil {
			p, ok = n.path()
		}
		e.mu.Unlock()
		if ok {
			fd, err := openAt(e.root, p, flags)
			if err == nil {
				if k, kerr := handleKey(fd, "", unix.AT_EMPTY_PATH); kerr == nil && k == key {
					return &file{fd: fd, key: key, n: n}, nil
				}
				unix.Close(fd)
			} else if !moved(err) {
				return nil, err
			}
		}
		if attempt > 0 || !e.rescan(c, key) {
			return nil, unix.ESTALE
		}
	}
}

// moved reports whether an open failed because the path no longer leads
// where it did (a rename or removal by anyone sharing the tree, a
// directory replaced by a symlink).
func moved(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) ||
		errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EAGAIN)
}

// remember records that key is name in directory parent.
func (e *Export) remember(key string, parent *node, name string, dir bool) *node {
	e.mu.Lock()
	defer e.mu.Unlock()
	if key == e.rootKey {
		return e.nodes[key]
	}
	if n := e.nodes[key]; n != nil {
		n.parent, n.name, n.dir = parent, name, dir
		return n
	}
	if len(e.nodes) >= maxNodes {
		e.nodes = map[string]*node{e.rootKey: e.nodes[e.rootKey]}
	}
	n := &node{key: key, parent: parent, name: name, dir: dir}
	e.nodes[key] = n
	delete(e.missing, key)
	return n
}

// forget drops key if it was last seen as name in parent.
func (e *Export) forget(key string, parent *node, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if n := e.nodes[key]; n != nil && n.parent == parent && n.name == name && key != e.rootKey {
		delete(e.nodes, key)
	}
}
