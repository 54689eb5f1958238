package volume

import (
	"strings"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
)

// MaxPathLen bounds a volume path (Linux's PATH_MAX).
const MaxPathLen = 4096

// Clean parses a volume content API path into its components below the
// volume's root: "/a/b", "a/b" and "a//./b/" are [a b]; "", "/" and "."
// are the root (no components). A ".." component, a NUL byte or an
// over-long path is errdefs.ErrInvalidArgument: paths never climb, and
// the resolution under the root (openat2 RESOLVE_IN_ROOT) is a second
// guard, not the first.
func Clean(p string) ([]string, error) {
	if len(p) > MaxPathLen {
		return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "path is longer than %d bytes", MaxPathLen)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "path %q contains a NUL byte", p)
	}
	var out []string
	for c := range strings.SplitSeq(p, "/") {
		switch c {
		case "", ".":
		case "..":
			return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "path %q has a '..' component: volume paths cannot climb", p)
		default:
			if len(c) > 255 {
				return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "path %q has a component longer than 255 bytes", p)
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// display is the canonical form of components: "/a/b", "/" for the root.
func display(comps []string) string { return "/" + strings.Join(comps, "/") }

// Entry is a file's metadata in a volume; the server turns it into the
// REST API's VolumeEntryStat.
type Entry struct {
	Name   string // the last path component ("/" for the root)
	Path   string // from the volume's root, with a leading "/"
	Type   EntryType
	Size   int64
	Mode   uint32 // permission bits, setuid, setgid and sticky
	UID    uint32
	GID    uint32
	Atime  time.Time
	Mtime  time.Time
	Ctime  time.Time
	Target string // a symlink's target ("" otherwise)
}

// EntryType is what an Entry is.
type EntryType string

// The entry types (the REST API's names).
const (
	TypeFile      EntryType = "file"
	TypeDirectory EntryType = "directory"
	TypeSymlink   EntryType = "symlink"
	TypeUnknown   EntryType = "unknown"
)
