package oci

import (
	"fmt"
	"strings"
)

// entryKind says what a tar entry means to the layered tree.
type entryKind int

const (
	entryFile     entryKind = iota // a file, directory, link or node at path
	entryRoot                      // the root directory itself ("./")
	entryWhiteout                  // delete path from lower layers
	entryOpaque                    // hide the lower contents of directory path
	entryMeta                      // another ".wh..wh." name (AUFS metadata): ignored
)

// Whiteout markers of the OCI image layer spec.
const (
	whiteoutPrefix = ".wh."
	whiteoutMeta   = ".wh..wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// entry is a tar entry name, checked and split.
type entry struct {
	kind entryKind
	path string // slash-separated, relative, clean; "" for the root
	dir  string // parent of path; "" for the root
	base string // last element of path
}

// parseEntry checks a layer entry name and says what it means. Names are
// relative to the image root: a leading "./" and trailing "/" are allowed,
// absolute names and ".." elements are not (ErrUnsafeLayer). For a whiteout
// path names the entry to delete; for an opaque marker, the directory.
func parseEntry(name string) (entry, error) {
	p, err := cleanEntryPath(name)
	if err != nil {
		return entry{}, err
	}
	if p == "" {
		return entry{kind: entryRoot}, nil
	}
	dir, base := "", p
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		dir, base = p[:i], p[i+1:]
	}
	switch {
	case base == whiteoutOpaque:
		return entry{kind: entryOpaque, path: dir, dir: dir}, nil
	case strings.HasPrefix(base, whiteoutMeta):
		return entry{kind: entryMeta, path: p, dir: dir, base: base}, nil
	case strings.HasPrefix(base, whiteoutPrefix):
		victim := base[len(whiteoutPrefix):]
		if victim == "" || victim == "." || victim == ".." {
			return entry{}, fmt.Errorf("entry %q: invalid whiteout: %w", name, ErrUnsafeLayer)
		}
		return entry{kind: entryWhiteout, path: joinPath(dir, victim), dir: dir, base: victim}, nil
	}
	return entry{kind: entryFile, path: p, dir: dir, base: base}, nil
}

// cleanEntryPath returns name as a clean relative path ("" for the root),
// or ErrUnsafeLayer when it is empty, absolute, contains a NUL or a ".."
// element.
func cleanEntryPath(name string) (string, error) {
	switch {
	case name == "":
		return "", fmt.Errorf("empty entry name: %w", ErrUnsafeLayer)
	case strings.IndexByte(name, 0) >= 0:
		return "", fmt.Errorf("entry %q: NUL in name: %w", name, ErrUnsafeLayer)
	case name[0] == '/':
		return "", fmt.Errorf("entry %q: absolute path: %w", name, ErrUnsafeLayer)
	}
	var b strings.Builder
	for elem := range strings.SplitSeq(name, "/") {
		switch elem {
		case "", ".":
			continue
		case "..":
			return "", fmt.Errorf("entry %q: \"..\" in path: %w", name, ErrUnsafeLayer)
		}
		if b.Len() > 0 {
			b.WriteByte('/')
		}
		b.WriteString(elem)
	}
	return b.String(), nil
}

func joinPath(dir, base string) string {
	if dir == "" {
		return base
	}
	return dir + "/" + base
}
