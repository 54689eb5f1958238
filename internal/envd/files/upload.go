package files

import (
	"compress/gzip"
	"errors"
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
		err = errdefs.Publicf(errdefs.ErrInvalidArgument, "unsupported content type %q", r.Header.Get("Content-Type"))
	}
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	if len(up.out) == 0 {
		h.writeErr(w, r, errdefs.Publicf(errdefs.ErrInvalidArgument, "no file part in upload"))
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
			return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "gzip body: %v", err)
		}
		return zr, nil
	default:
		return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "unsupported content encoding %q", enc)
	}
}

func (up *upload) octetStream(r *http.Request, body io.Reader) error {
	p := r.URL.Query().Get("path")
	if p == "" {
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "path query parameter is required for application/octet-stream")
	}
	return up.write(p, body)
}

func (up *upload) multipart(r *http.Request, body io.Reader) error {
	_, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || params["boundary"] == "" {
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "multipart upload without boundary")
	}
	mr := multipart.NewReader(body, params["boundary"])
	queryPath := r.URL.Query().Get("path")
	for {
		part, err := mr.NextRawPart()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return errdefs.Publicf(errdefs.ErrInvalidArgument, "read multipart body: %v", err)
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
			return errdefs.Publicf(errdefs.ErrInvalidArgument, "file part without filename and no path query parameter")
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
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "path '%s' is written twice in one upload", abs)
	}
	up.written[abs] = true
	if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "path '%s' is a directory", abs)
	}
	if err := up.h.mkdirAll(filepath.Dir(abs), up.u); err != nil {
		return err
	}
	f, err := os.OpenFile(abs, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
	if err != nil {
		return errdefs.PublicWrap(statKind(err), "open '%s' for writing", abs)
	}
	meta, err := up.fill(f, abs, src)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = errdefs.PublicWrap(uploadKind(cerr), "write '%s'", abs)
	}
	if err != nil {
		return err
	}
	up.out = append(up.out, EntryInfo{Path: abs, Name: filepath.Base(abs), Type: "file", Metadata: meta})
	return nil
}

// fill copies src into f (the file at abs), gives it to the user and
// stores the upload's metadata; it returns the metadata as stored.
func (up *upload) fill(f *os.File, abs string, src io.Reader) (map[string]string, error) {
	buf := getCopyBuf()
	defer putCopyBuf(buf)
	if _, err := io.CopyBuffer(f, src, *buf); err != nil {
		return nil, errdefs.PublicWrap(uploadKind(err), "write '%s'", abs)
	}
	if err := up.h.cfg.Chown(abs, up.u); err != nil {
		return nil, errdefs.PublicWrap(uploadKind(err), "write '%s'", abs)
	}
	return up.h.storeMetadata(f, abs, up.meta)
}

// uploadKind keeps an error's kind or calls it internal; a failure reading
// the request body is the client's.
func uploadKind(err error) error {
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return statKind(err)
	case errors.As(err, &mbe):
		return errors.Join(err, errdefs.ErrResourceExhausted)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, gzipErrChecksum), errors.Is(err, gzipErrHeader):
		return errors.Join(err, errdefs.Public(errdefs.ErrInvalidArgument, "read upload: "+err.Error()))
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
	for _, k := range errdefs.Kinds() {
		if errors.Is(err, k) {
			return k
		}
	}
	return nil
}

// mkdirAll creates dir and its missing parents (0755), giving each created
// directory to u.
func (h *Handler) mkdirAll(dir string, u *users.User) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return errdefs.Publicf(errdefs.ErrInvalidArgument, "parent '%s' is not a directory", dir)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return errdefs.PublicWrap(statKind(err), "stat '%s'", dir)
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := h.mkdirAll(parent, u); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return errdefs.PublicWrap(uploadKind(err), "create directory '%s'", dir)
	}
	if err := h.cfg.Chown(dir, u); err != nil {
		return errdefs.PublicWrap(uploadKind(err), "chown directory '%s'", dir)
	}
	return nil
}
