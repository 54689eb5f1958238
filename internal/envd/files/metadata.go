package files

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"syscall"

	"github.com/moatsh/moat/internal/envd/xattrmeta"
	"github.com/moatsh/moat/internal/errdefs"
)

// parseMetadata collects and validates an upload's X-Metadata-<key>
// headers (see package xattrmeta). It returns nil when there are none.
func parseMetadata(h http.Header) (map[string]string, error) {
	meta := xattrmeta.FromHeaders(h)
	if err := xattrmeta.Validate(meta); err != nil {
		return nil, err
	}
	return meta, nil
}

// storeMetadata makes meta the whole metadata set of the uploaded file f,
// as E2B's envd does after writing the body, and returns the set as it
// reads back from the file. A file system without xattrs (/proc, /sys) is
// not an error: the body is kept, the failure logged, and the answer then
// carries no metadata, so it never claims what was not stored.
func (h *Handler) storeMetadata(f *os.File, abs string, meta map[string]string) (map[string]string, error) {
	if err := xattrmeta.Replace(f, meta); err != nil {
		switch {
		case xattrmeta.Unsupported(err):
			h.log.Warn("file system does not support xattrs; metadata not persisted", "path", abs, "err", err)
		case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
			return nil, fmt.Errorf("%w (%w)", errdefs.Publicf(errdefs.ErrNoSpace,
				"not enough space for file metadata: %s", errnoText(err)), err)
		default:
			return nil, fmt.Errorf("%w (%w)", errdefs.Publicf(errdefs.ErrInternal,
				"error writing file metadata: %s", errnoText(err)), err)
		}
	}
	got, err := xattrmeta.ReadFile(f)
	if err != nil {
		h.log.Warn("read back file metadata for the upload answer", "path", abs, "err", err)
		return nil, nil
	}
	return got, nil
}

// errnoText is the system's text for the errno err wraps ("no space left on
// device"), or err's own text when it wraps none.
func errnoText(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}
