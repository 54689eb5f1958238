package files

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/errdefs"
)

// Metadata limits (E2B envd.yaml): the xattr name "user.e2b.<key>" must fit
// in 255 bytes, and the whole set in 4096.
const (
	metaHeaderPrefix = "X-Metadata-"
	xattrPrefix      = "user.e2b."
	maxMetaKey       = 246
	maxMetaTotal     = 4096
)

// parseMetadata collects X-Metadata-<key> headers; keys are lowercased.
// It returns nil when there are none.
func parseMetadata(h http.Header) (map[string]string, error) {
	var out map[string]string
	total := 0
	for name, vals := range h {
		if len(name) <= len(metaHeaderPrefix) || !strings.EqualFold(name[:len(metaHeaderPrefix)], metaHeaderPrefix) {
			continue
		}
		key := strings.ToLower(name[len(metaHeaderPrefix):])
		val := strings.Join(vals, ", ")
		switch {
		case len(key) > maxMetaKey:
			return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "metadata key %.20q... is longer than %d bytes", key, maxMetaKey)
		case !printable(key) || !printable(val):
			return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "metadata %q must be printable ASCII", key)
		}
		total += len(key) + len(val)
		if total > maxMetaTotal {
			return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "metadata is larger than %d bytes", maxMetaTotal)
		}
		if out == nil {
			out = map[string]string{}
		}
		out[key] = val
	}
	return out, nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// replaceMetadata makes meta the file's whole user.e2b.* xattr set. A file
// system without user xattrs is fine as long as there is nothing to set.
func replaceMetadata(f *os.File, meta map[string]string) error {
	fd := int(f.Fd())
	old, err := listXattrs(fd)
	if err != nil && !unsupported(err) {
		return fmt.Errorf("list xattrs: %w", err)
	}
	for _, name := range old {
		if !strings.HasPrefix(name, xattrPrefix) {
			continue
		}
		if _, keep := meta[name[len(xattrPrefix):]]; keep {
			continue
		}
		if err := unix.Fremovexattr(fd, name); err != nil && !errors.Is(err, unix.ENODATA) {
			return fmt.Errorf("remove xattr %s: %w", name, err)
		}
	}
	for k, v := range meta {
		if err := unix.Fsetxattr(fd, xattrPrefix+k, []byte(v), 0); err != nil {
			if unsupported(err) {
				return fmt.Errorf("file system does not support metadata: %w: %w", err, errdefs.ErrFailedPrecondition)
			}
			return fmt.Errorf("set xattr %s: %w", k, err)
		}
	}
	return nil
}

func unsupported(err error) bool {
	return errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP)
}

func listXattrs(fd int) ([]string, error) {
	size, err := unix.Flistxattr(fd, nil)
	if err != nil || size == 0 {
		return nil, err
	}
	buf := make([]byte, size)
	n, err := unix.Flistxattr(fd, buf)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, b := range bytes.Split(buf[:n], []byte{0}) {
		if len(b) > 0 {
			names = append(names, string(b))
		}
	}
	return names, nil
}
