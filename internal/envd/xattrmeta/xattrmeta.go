// Package xattrmeta stores the user-defined file metadata of E2B's envd
// (>= 0.6.2) in extended attributes, so that POST /files (which writes it from
// X-Metadata-* headers) and the filesystem service's EntryInfo (which reports
// it) agree on one format: each key is the xattr "user.e2b.<key>", its value
// the xattr's value. Keys and values are printable US-ASCII; a key fits the
// kernel's 255-byte xattr name limit and a file's whole set fits one 4 KiB
// ext4 block (the limits of E2B's envd.yaml).
package xattrmeta

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/errdefs"
)

// Limits and names, as in E2B's envd.
const (
	// Prefix is the xattr namespace of the metadata keys.
	Prefix = "user.e2b."
	// HeaderPrefix starts the upload request headers that carry metadata.
	HeaderPrefix = "X-Metadata-"
	// MaxKeyLen is the longest key: the xattr name limit (255) minus Prefix.
	MaxKeyLen = 255 - len(Prefix)
	// MaxTotalLen bounds a file's whole set, counted as the sum over its
	// keys of len(Prefix)+len(key)+len(value).
	MaxTotalLen = 4096
)

// FromHeaders collects the X-Metadata-<key> headers of an upload: keys are
// the lowercased rest of the header name, a header sent more than once
// counts with its first value, and a bare "X-Metadata-" is ignored. It
// returns nil when there are none. It does not validate; see Validate.
func FromHeaders(h http.Header) map[string]string {
	var out map[string]string
	for name, vals := range h {
		if len(vals) == 0 || len(name) <= len(HeaderPrefix) || !strings.EqualFold(name[:len(HeaderPrefix)], HeaderPrefix) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[strings.ToLower(name[len(HeaderPrefix):])] = vals[0]
	}
	return out
}

// Validate checks meta against E2B's rules before anything is written; its
// errors are of kind errdefs.ErrInvalidArgument with a public text. Keys are
// checked in sorted order so that the error names the same key every time.
func Validate(meta map[string]string) error {
	total := 0
	for _, k := range slices.Sorted(maps.Keys(meta)) {
		v := meta[k]
		switch {
		case k == "":
			return errdefs.Publicf(errdefs.ErrInvalidArgument, "invalid metadata: metadata key must not be empty")
		case len(k) > MaxKeyLen:
			return errdefs.Publicf(errdefs.ErrInvalidArgument, "invalid metadata: metadata key %.32q... is longer than %d bytes", k, MaxKeyLen)
		}
		if i := nonPrintable(k); i >= 0 {
			return errdefs.Publicf(errdefs.ErrInvalidArgument,
				"invalid metadata: metadata key contains non-printable-ASCII byte 0x%02x at offset %d", k[i], i)
		}
		if i := nonPrintable(v); i >= 0 {
			return errdefs.Publicf(errdefs.ErrInvalidArgument,
				"invalid metadata: metadata value for key %q contains non-printable-ASCII byte 0x%02x at offset %d", k, v[i], i)
		}
		total += len(Prefix) + len(k) + len(v)
	}
	if total > MaxTotalLen {
		return errdefs.Publicf(errdefs.ErrInvalidArgument,
			"invalid metadata: total metadata size %d is larger than %d bytes", total, MaxTotalLen)
	}
	return nil
}

// nonPrintable returns the offset of the first byte of s outside 0x20-0x7E,
// or -1.
func nonPrintable(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return i
		}
	}
	return -1
}

// Unsupported reports whether err says the file system has no (user)
// extended attributes, as /proc, /sys and some FUSE mounts.
func Unsupported(err error) bool {
	return errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP)
}

// Replace makes meta the whole user.e2b.* set of the open file f: keys not
// in meta are removed, so a nil meta clears the set (O_TRUNC keeps xattrs).
// It works on the descriptor, so a concurrent rename cannot redirect it.
// Callers test the error with Unsupported and for ENOSPC/EDQUOT.
func Replace(f *os.File, meta map[string]string) error {
	fd := int(f.Fd())
	names, err := list(func(b []byte) (int, error) { return unix.Flistxattr(fd, b) })
	if err != nil {
		return fmt.Errorf("list xattrs of %s: %w", f.Name(), err)
	}
	for _, name := range names {
		key, ok := strings.CutPrefix(name, Prefix)
		if !ok {
			continue
		}
		if _, keep := meta[key]; keep {
			continue
		}
		if err := unix.Fremovexattr(fd, name); err != nil && !errors.Is(err, unix.ENODATA) {
			return fmt.Errorf("remove xattr %s of %s: %w", name, f.Name(), err)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(meta)) {
		if err := unix.Fsetxattr(fd, Prefix+k, []byte(meta[k]), 0); err != nil {
			return fmt.Errorf("set xattr %s%s of %s: %w", Prefix, k, f.Name(), err)
		}
	}
	return nil
}

// ReadFile returns the metadata of the open file f (nil when it has none or
// its file system has no xattrs).
func ReadFile(f *os.File) (map[string]string, error) {
	fd := int(f.Fd())
	return read(
		func(b []byte) (int, error) { return unix.Flistxattr(fd, b) },
		func(name string, b []byte) (int, error) { return unix.Fgetxattr(fd, name, b) })
}

// Read returns the metadata of the file at path, following symlinks as E2B's
// envd does (a symlink reports its target's metadata). It is nil when there
// is none or the file system has no xattrs.
func Read(path string) (map[string]string, error) {
	return read(
		func(b []byte) (int, error) { return unix.Listxattr(path, b) },
		func(name string, b []byte) (int, error) { return unix.Getxattr(path, name, b) })
}

// read collects the user.e2b.* attributes through listFn and getFn. Entries
// whose key or value is not valid UTF-8 (set inside the sandbox with
// setfattr, say) are skipped: a proto map<string,string> cannot carry them,
// and one would make the whole Stat or ListDir answer fail to marshal.
func read(listFn func([]byte) (int, error), getFn func(string, []byte) (int, error)) (map[string]string, error) {
	names, err := list(listFn)
	if err != nil {
		if Unsupported(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("list xattrs: %w", err)
	}
	var out map[string]string
	for _, name := range names {
		key, ok := strings.CutPrefix(name, Prefix)
		if !ok {
			continue
		}
		val, err := get(getFn, name)
		if errors.Is(err, unix.ENODATA) {
			continue // removed since the listing
		}
		if err != nil {
			return nil, fmt.Errorf("get xattr %s: %w", name, err)
		}
		if !utf8.ValidString(key) || !utf8.Valid(val) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[key] = string(val)
	}
	return out, nil
}

// list calls a listxattr variant, growing its buffer while the list grows
// between the size probe and the read.
func list(fn func([]byte) (int, error)) ([]string, error) {
	for range 8 {
		size, err := fn(nil)
		if err != nil || size == 0 {
			return nil, err
		}
		buf := make([]byte, size)
		n, err := fn(buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
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
	return nil, unix.ERANGE
}

// get calls a getxattr variant, growing its buffer like list.
func get(fn func(string, []byte) (int, error), name string) ([]byte, error) {
	for range 8 {
		size, err := fn(name, nil)
		if err != nil {
			return nil, err
		}
		if size == 0 {
			return []byte{}, nil
		}
		buf := make([]byte, size)
		n, err := fn(name, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
	return nil, unix.ERANGE
}
