package export

import (
	"time"

	"golang.org/x/sys/unix"
)

// seen is an entry a walk found: its parent's key and its name.
type seen struct {
	parent string
	name   string
	dir    bool
}

// rescan walks the whole tree as root (the thread runs as c otherwise),
// recording where every handle is, and reports whether key was found.
// Walks are rate limited: a key that a walk in the last rescanEvery did
// not find is not looked for again until then, so a client repeating a
// stale handle cannot keep the server walking.
func (e *Export) rescan(c Cred, key string) bool {
	e.scanMu.Lock()
	defer e.scanMu.Unlock()
	e.mu.Lock()
	recent := time.Since(e.lastScan) < rescanEvery
	_, known := e.nodes[key]
	gone := e.missing[key]
	e.mu.Unlock()
	switch {
	case recent && gone:
		return false
	case recent && known:
		return true // a walk that just ran (for another caller) placed it
	}
	found := map[string]seen{}
	_ = asRoot(c, func() error {
		e.walk(e.root, e.rootKey, found, 0)
		return nil
	})
	e.mu.Lock()
	defer e.mu.Unlock()
	e.merge(found)
	e.lastScan = time.Now()
	e.missing = map[string]bool{}
	if _, ok := found[key]; !ok && key != e.rootKey {
		e.missing[key] = true
		return false
	}
	return true
}

// merge makes the nodes say what a walk found; nodes keep their identity
// (pointers), so children the walk did not reach still hang off them.
// e.mu is held.
func (e *Export) merge(found map[string]seen) {
	if len(e.nodes)+len(found) > maxNodes {
		e.nodes = map[string]*node{e.rootKey: e.nodes[e.rootKey]}
	}
	for k, s := range found {
		n := e.nodes[k]
		if n == nil {
			n = &node{key: k}
			e.nodes[k] = n
		}
		n.name, n.dir = s.name, s.dir
	}
	for k, s := range found {
		if p := e.nodes[s.parent]; p != nil {
			e.nodes[k].parent = p
		}
	}
}

// walk records every entry under directory fd (whose key is dkey) in
// found, up to maxNodes entries and maxDepth levels.
func (e *Export) walk(fd int, dkey string, found map[string]seen, depth int) {
	if depth > maxDepth {
		return
	}
	dir, err := openAt(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return
	}
	defer unix.Close(dir)
	buf := make([]byte, 32<<10)
	for len(found) < maxNodes {
		n, err := unix.Getdents(dir, buf)
		if err != nil || n <= 0 {
			return
		}
		for _, ent := range parseDirents(buf[:n]) {
			if ent.name == "." || ent.name == ".." {
				continue
			}
			k, err := handleKey(dir, ent.name, 0)
			if err != nil {
				continue
			}
			isDir := ent.typ == unix.DT_DIR
			found[k] = seen{parent: dkey, name: ent.name, dir: isDir}
			if isDir {
				if sub, err := openAt(dir, ent.name, unix.O_PATH|unix.O_DIRECTORY); err == nil {
					e.walk(sub, k, found, depth+1)
					unix.Close(sub)
				}
			}
		}
	}
}
