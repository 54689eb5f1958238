package files

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/moatsh/moat/internal/envd/signature"
	"github.com/moatsh/moat/internal/errdefs"
)

// copyBuf is the size of the buffers that stream file contents.
const copyBuf = 256 << 10

func (h *Handler) download(w http.ResponseWriter, r *http.Request) {
	u, err := h.caller(r, signature.OpRead)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	p, err := h.resolve(r.URL.Query().Get("path"), u)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	f, fi, err := openRegular(p)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	defer f.Close()
	enc, ok := chooseEncoding(r.Header.Get("Accept-Encoding"))
	if !ok {
		WriteError(w, http.StatusNotAcceptable, "no acceptable content encoding")
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": filepath.Base(p)}))
	hdr.Add("Vary", "Accept-Encoding")
	if enc != "gzip" {
		http.ServeContent(w, r, filepath.Base(p), fi.ModTime(), f)
		return
	}
	ctype := mime.TypeByExtension(filepath.Ext(p))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	hdr.Set("Content-Type", ctype)
	hdr.Set("Content-Encoding", "gzip")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	zw := gzip.NewWriter(w)
	if _, err := io.CopyBuffer(zw, f, make([]byte, copyBuf)); err != nil {
		h.log.Warn("gzip download interrupted", "path", p, "err", err)
		return
	}
	if err := zw.Close(); err != nil {
		h.log.Warn("gzip download interrupted", "path", p, "err", err)
	}
}

// openRegular opens p for reading; it must be an existing regular file.
func openRegular(p string) (*os.File, fs.FileInfo, error) {
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil, fmt.Errorf("path '%s' does not exist: %w", p, errdefs.ErrNotFound)
	case err != nil:
		return nil, nil, fmt.Errorf("stat '%s': %w", p, statKind(err))
	case fi.IsDir():
		return nil, nil, fmt.Errorf("path '%s' is a directory: %w", p, errdefs.ErrInvalidArgument)
	case !fi.Mode().IsRegular():
		return nil, nil, fmt.Errorf("path '%s' is not a regular file: %w", p, errdefs.ErrInvalidArgument)
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, nil, fmt.Errorf("open '%s': %w", p, statKind(err))
	}
	return f, fi, nil
}

// statKind gives a file-system error its errdefs kind.
func statKind(err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errors.Join(err, errdefs.ErrNotFound)
	case errors.Is(err, fs.ErrPermission):
		return errors.Join(err, errdefs.ErrPermissionDenied)
	case errors.Is(err, errNotDir), errors.Is(err, errNameTooLong):
		return errors.Join(err, errdefs.ErrInvalidArgument)
	}
	return errors.Join(err, errdefs.ErrInternal)
}

// chooseEncoding picks gzip or identity from an Accept-Encoding header; ok
// is false when neither is acceptable.
func chooseEncoding(accept string) (enc string, ok bool) {
	if strings.TrimSpace(accept) == "" {
		return "identity", true
	}
	q := map[string]float64{}
	for _, part := range strings.Split(accept, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		name = strings.ToLower(strings.TrimSpace(name))
		if name == "" {
			continue
		}
		weight := 1.0
		if k, v, found := strings.Cut(strings.TrimSpace(params), "="); found && strings.TrimSpace(k) == "q" {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				weight = f
			}
		}
		q[name] = weight
	}
	if w, found := q["gzip"]; found && w > 0 {
		return "gzip", true
	}
	if w, found := q["identity"]; found {
		if w > 0 {
			return "identity", true
		}
		return "", false
	}
	if w, found := q["*"]; found && w == 0 {
		return "", false
	}
	return "identity", true
}
