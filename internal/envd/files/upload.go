package files

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/moatsh/moat/internal/envd/signature"
	"github.com/moatsh/moat/internal/envd/users"
	"github.com/moatsh/moat/internal/errdefs"
)

var (
	errNotDir      = syscall.ENOTDIR
	errNameTooLong = syscall.ENAMETOOLONG
)

// noSpaceMsg is E2B envd's message for ENOSPC.
const noSpaceMsg = "not enough disk space available"

// EntryInfo describes an uploaded file in the POST /files answer.
type EntryInfo struct {
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// upload is one request's state.
type upload struct {
	h       *Handler
	u       *users.User
	meta    map[string]string
	written map[string]bool
	out     []EntryInfo
}

func (h *Handler) upload(w http.ResponseWriter, r *http.Request) {
	u, err := h.caller(r, signature.OpWrite)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	meta, err := parseMetadata(r.Header)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	body, err := decodedBody(r)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	up := &upload{h: h, u: u, meta: meta, written: map[string]bool{}}
	ctype, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ctype {
	case "multipart/form-data":
		err = up.multipart(r, body)
	case "application/octet-stream":
		err = up.octetStream(r, body)
	default:
		err = fmt.Errorf("unsupported content type %q: %w", r.Header.Get("Content-Type"), errdefs.ErrInvalidArgument)
	}
	if err != nil {
		if StatusOf(err) == http.StatusInsufficientStorage {
			h.log.Warn("upload failed: disk full", "err", err)
			WriteError(w, http.StatusInsufficientStorage, noSpaceMsg)
			return
		}
		h.writeErr(w, r, err)
		return
	}
	if len(up.out) == 0 {
		h.writeErr(w, r, fmt.Errorf("no file part in upload: %w", errdefs.ErrInvalidArgument))
		return
	}
	writeJSON(w, http.StatusOK, up.out)
}

// decodedBody undoes a gzip Content-Encoding.
func decodedBody(r *http.Request) (io.Reader, error) {
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		return r.Body, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, fmt.Errorf("gzip body: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		return zr, nil
	default:
		return nil, fmt.Errorf("unsupported content encoding %q: %w", enc, errdefs.ErrInvalidArgument)
	}
}

func (up *upload) octetStream(r *http.Request, body io.Reader) error {
	p := r.URL.Query().Get("path")
	if p == "" {
		return fmt.Errorf("path query parameter is required for application/octet-stream: %w", errdefs.ErrInvalidArgument)
	}
	return up.write(p, body)
}

func (up *upload) multipart(r *http.Request, body io.Reader) error {
	_, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || params["boundary"] == "" {
		return fmt.Errorf("multipart upload without boundary: %w", errdefs.ErrInvalidArgument)
	}
	mr := multipart.NewReader(body, params["boundary"])
	queryPath := r.URL.Query().Get("path")
	for {
		part, err := mr.NextRawPart()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read multipart body: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		_, cd, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
		if cd["name"] != "file" {
			continue
		}
		dest := queryPath
		if dest == "" {
			dest = cd["filename"]
		}
		if dest == "" {
			return fmt.Errorf("file part without filename and no path query parameter: %w", errdefs.ErrInvalidArgument)
		}
		if err := up.write(dest, part); err != nil {
			return err
		}
	}
}

// write streams src to the file p names.
func (up *upload) write(p string, src io.Reader) error {
	abs, err := up.h.resolve(p, up.u)
	if err != nil {
		return err
	}
	if up.written[abs] {
		return fmt.Errorf("path '%s' is written twice in one upload: %w", abs, errdefs.ErrInvalidArgument)
	}
	up.written[abs] = true
	if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
		return fmt.Errorf("path '%s' is a directory: %w", abs, errdefs.ErrInvalidArgument)
	}
	if err := up.mkdirAll(filepath.Dir(abs)); err != nil {
		return err
	}
	f, err := os.OpenFile(abs, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
	if err != nil {
		return fmt.Errorf("open '%s' for writing: %w", abs, statKind(err))
	}
	_, cerr := io.CopyBuffer(f, src, make([]byte, copyBuf))
	if cerr == nil {
		cerr = up.h.cfg.Chown(abs, up.u)
	}
	if cerr == nil {
		cerr = replaceMetadata(f, up.meta)
	}
	if err := f.Close(); cerr == nil && err != nil {
		cerr = err
	}
	if cerr != nil {
		return fmt.Errorf("write '%s': %w", abs, uploadKind(cerr))
	}
	up.out = append(up.out, EntryInfo{Path: abs, Name: filepath.Base(abs), Type: "file", Metadata: up.meta})
	return nil
}

// uploadKind keeps an error's kind or calls it internal; a failure reading
// the request body is the client's.
func uploadKind(err error) error {
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return err
	case errors.As(err, &mbe):
		return errors.Join(err, errdefs.ErrResourceExhausted)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, gzipErrChecksum), errors.Is(err, gzipErrHeader):
		return errors.Join(err, errdefs.ErrInvalidArgument)
	case kindOf(err) != nil:
		return err
	}
	return statKind(err)
}

var (
	gzipErrChecksum = gzip.ErrChecksum
	gzipErrHeader   = gzip.ErrHeader
)

// kindOf returns err's errdefs kind, if any.
func kindOf(err error) error {
	for _, k := range []error{errdefs.ErrInvalidArgument, errdefs.ErrNotFound, errdefs.ErrPermissionDenied,
		errdefs.ErrUnauthenticated, errdefs.ErrInternal, errdefs.ErrResourceExhausted} {
		if errors.Is(err, k) {
			return k
		}
	}
	return nil
}

// mkdirAll creates dir and its missing parents (0755), giving each created
// directory to the user.
func (up *upload) mkdirAll(dir string) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("parent '%s' is not a directory: %w", dir, errdefs.ErrInvalidArgument)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("stat '%s': %w", dir, statKind(err))
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := up.mkdirAll(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create directory '%s': %w", dir, uploadKind(err))
	}
	if err := up.h.cfg.Chown(dir, up.u); err != nil {
		return fmt.Errorf("chown directory '%s': %w", dir, statKind(err))
	}
	return nil
}
