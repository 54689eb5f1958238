package files

import (
	"errors"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"

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
	accept := r.Header.Get("Accept-Encoding")
	enc, ok := chooseEncoding(accept)
	if !ok {
		WriteError(w, http.StatusNotAcceptable, "no acceptable content encoding")
		return
	}
	if enc == "gzip" && identityAcceptable(accept) && !worthCompressing(f, fi.Size()) {
		enc = "identity"
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
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(w)
	buf := getCopyBuf()
	defer putCopyBuf(buf)
	if _, err := io.CopyBuffer(zw, f, *buf); err != nil {
		h.log.Warn("gzip download interrupted", "path", p, "err", err)
		return
	}
	if err := zw.Close(); err != nil {
		h.log.Warn("gzip download interrupted", "path", p, "err", err)
	}
}

// Compression must pay for itself: on the links sandboxes sit behind
// (loopback, a virtio NIC) the compressor is the bottleneck, so files that
// do not shrink go out as they are (the SDKs accept identity answers) and
// the others at gzip's fastest level.
const (
	compressMinSize = 1 << 10  // below it gzip's framing costs more than it saves
	sampleChunk     = 16 << 10 // each of the three samples (start, middle, end)
	minSaving       = 0.10     // a sample is compressible when it shrinks by this much
)

// worthCompressing compresses three samples of f (start, middle, end) at
// the fastest level and reports whether at least two of them shrank by
// minSaving (so a compressible header alone does not decide).
func worthCompressing(f io.ReaderAt, size int64) bool {
	if size < compressMinSize {
		return false
	}
	var out countingWriter
	sm := samplers.Get().(*sampler)
	defer samplers.Put(sm)
	zw, buf := sm.zw, sm.buf
	shrank, samples := 0, 0
	for _, off := range []int64{0, size/2 - sampleChunk/2, size - sampleChunk} {
		n, err := f.ReadAt(buf, max(off, 0))
		if n == 0 && err != nil {
			break
		}
		out.n = 0
		zw.Reset(&out)
		zw.Write(buf[:n])
		zw.Close()
		samples++
		if float64(out.n) <= float64(n)*(1-minSaving) {
			shrank++
		}
	}
	return samples > 0 && shrank*3 >= samples*2
}

// The compressors a download uses come from pools: a new one allocates
// close to 1 MiB of tables, which made a 1 KiB download ten times slower
// than a bare file server's (moat bench --files).
var (
	gzipWriters = sync.Pool{New: func() any {
		zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed) // a valid level: no error
		return zw
	}}
	samplers = sync.Pool{New: func() any {
		zw, _ := flate.NewWriter(io.Discard, flate.BestSpeed)
		return &sampler{zw: zw, buf: make([]byte, sampleChunk)}
	}}
)

// copyBufs are the buffers files stream through (copyBuf bytes each).
var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBuf); return &b }}

func getCopyBuf() *[]byte  { return copyBufs.Get().(*[]byte) }
func putCopyBuf(b *[]byte) { copyBufs.Put(b) }

// sampler is worthCompressing's compressor and sample buffer.
type sampler struct {
	zw  *flate.Writer
	buf []byte
}

type countingWriter struct{ n int }

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += len(p)
	return len(p), nil
}

// identityAcceptable reports whether an Accept-Encoding header allows an
// uncompressed answer (RFC 9110 12.5.3: unless identity or * has q=0).
func identityAcceptable(accept string) bool {
	star := true
	for _, part := range strings.Split(accept, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		name = strings.ToLower(strings.TrimSpace(name))
		zero := false
		if k, v, found := strings.Cut(strings.TrimSpace(params), "="); found && strings.TrimSpace(k) == "q" {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && f == 0 {
				zero = true
			}
		}
		switch name {
		case "identity":
			return !zero
		case "*":
			star = !zero
		}
	}
	return star
}

// openRegular opens p for reading; it must be an existing regular file.
func openRegular(p string) (*os.File, fs.FileInfo, error) {
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil, errdefs.Publicf(errdefs.ErrNotFound, "path '%s' does not exist", p)
	case err != nil:
		return nil, nil, errdefs.PublicWrap(statKind(err), "stat '%s'", p)
	case fi.IsDir():
		return nil, nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "path '%s' is a directory", p)
	case !fi.Mode().IsRegular():
		return nil, nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "path '%s' is not a regular file", p)
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, nil, errdefs.PublicWrap(statKind(err), "open '%s'", p)
	}
	return f, fi, nil
}

// statKind gives a file-system error its errdefs kind, with the system's
// text for it ("permission denied") as the public text of a client error.
func statKind(err error) error {
	var kind error
	switch {
	case errors.Is(err, fs.ErrNotExist):
		kind = errdefs.ErrNotFound
	case errors.Is(err, fs.ErrPermission):
		kind = errdefs.ErrPermissionDenied
	case errors.Is(err, errNotDir), errors.Is(err, errNameTooLong):
		kind = errdefs.ErrInvalidArgument
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		// E2B envd's text for it.
		return errors.Join(err, errdefs.Public(errdefs.ErrNoSpace, "not enough disk space available"))
	default:
		return errors.Join(err, errdefs.ErrInternal)
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errors.Join(err, errdefs.Public(kind, errno.Error()))
	}
	return errors.Join(err, kind)
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
