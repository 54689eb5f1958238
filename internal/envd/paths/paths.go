// Package paths turns the path strings that SDKs send into absolute paths
// inside the sandbox, with E2B envd's rules: empty means the default workdir
// (or home), "~" and "~/x" are the user's home, relative paths are joined to
// the user's home (not the workdir), and the result is cleaned.
package paths

import (
	"path/filepath"
	"strings"

	"github.com/moatsh/moat/internal/errdefs"
)

// MaxLen bounds the length of a path envd accepts (Linux PATH_MAX).
const MaxLen = 4096

// Resolve returns the absolute, cleaned form of p for a user whose home is
// home; workdir is the default for an empty path ("" = home).
func Resolve(p, home, workdir string) (string, error) {
	if len(p) > MaxLen {
		return "", errdefs.Publicf(errdefs.ErrInvalidArgument, "path too long (%d bytes)", len(p))
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", errdefs.Publicf(errdefs.ErrInvalidArgument, "path contains a NUL byte")
	}
	// home and workdir come from configuration; anchor them so that a
	// misconfigured relative value can never yield a relative result.
	home = filepath.Join("/", home)
	switch {
	case p == "":
		if workdir != "" {
			if !filepath.IsAbs(workdir) {
				return filepath.Join(home, workdir), nil
			}
			return filepath.Clean(workdir), nil
		}
		return home, nil
	case p == "~":
		return filepath.Clean(home), nil
	case strings.HasPrefix(p, "~/"):
		return filepath.Join(home, p[2:]), nil
	case strings.HasPrefix(p, "~"):
		return "", errdefs.Publicf(errdefs.ErrInvalidArgument, "path %q: home directories of other users are not supported", p)
	case filepath.IsAbs(p):
		return filepath.Clean(p), nil
	default:
		return filepath.Join(home, p), nil
	}
}
