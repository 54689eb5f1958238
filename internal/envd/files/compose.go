package files

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"syscall"

	"github.com/google/uuid"

	"github.com/moatsh/moat/internal/envd/users"
	"github.com/moatsh/moat/internal/errdefs"
)

// maxComposeBody bounds the JSON body of POST /files/compose. E2B's envd
// reads it unbounded; 16 MiB holds thousands of maximal (4 KiB) paths.
const maxComposeBody = 16 << 20

// unauthorizedMsg is E2B envd's answer to a missing or wrong access token.
const unauthorizedMsg = "unauthorized access, please provide a valid access token or method signing if supported"

// ComposeRequest is the body of POST /files/compose (E2B envd.yaml,
// ComposeRequest): the parts to concatenate, in order, and the file to make.
type ComposeRequest struct {
	SourcePaths []string `json:"source_paths"`
	Destination string   `json:"destination"`
	// Username owns the result and anchors relative paths; absent means
	// the default user. Present and empty is an unknown user, as in E2B.
	Username *string `json:"username,omitempty"`
}

// composeJob is a validated compose: absolute paths and the acting user.
type composeJob struct {
	u       *users.User
	dest    string
	sources []string
}

// Compose serves POST /files/compose as E2B's envd 0.6.13 does: it
// concatenates the source files, in order, into a temporary file beside the
// destination (with copy_file_range where the kernel has it), renames it
// over the destination and then deletes the sources. A failure leaves the
// sources and any earlier destination as they were. The result belongs to
// the user, like an upload; its missing parent directories are created.
//
// Unlike GET and POST /files, compose takes no signed URL: it needs the
// access token header whenever one is set. envd's server enforces that
// before routing; the handler checks it too, so it is safe mounted alone.
func (h *Handler) Compose(w http.ResponseWriter, r *http.Request) {
	if err := h.requireToken(r); err != nil {
		h.writeErr(w, r, err)
		return
	}
	req, err := parseComposeRequest(http.MaxBytesReader(w, r.Body, maxComposeBody))
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	job, err := h.planCompose(req)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	size, err := h.compose(job)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	h.log.Info("file compose completed", "path", job.dest, "sources", len(job.sources), "size", size, "user", job.u.Name)
	writeJSON(w, http.StatusOK, EntryInfo{Path: job.dest, Name: filepath.Base(job.dest), Type: "file"})
}

// requireToken checks the X-Access-Token header against the access token,
// if one is set.
func (h *Handler) requireToken(r *http.Request) error {
	token := h.cfg.State.AccessToken()
	if token == "" {
		return nil
	}
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Access-Token")), []byte(token)) != 1 {
		return errdefs.Public(errdefs.ErrUnauthenticated, unauthorizedMsg)
	}
	return nil
}

// parseComposeRequest decodes one JSON ComposeRequest from r the way E2B's
// envd does (encoding/json: unknown fields and anything after the first
// value are ignored) and checks the two required fields. Every error is
// invalid_argument.
func parseComposeRequest(r io.Reader) (ComposeRequest, error) {
	var req ComposeRequest
	if err := json.NewDecoder(r).Decode(&req); err != nil {
		return ComposeRequest{}, fmt.Errorf("%w (%w)",
			errdefs.Publicf(errdefs.ErrInvalidArgument, "invalid request body: %v", err), err)
	}
	if len(req.SourcePaths) == 0 {
		return ComposeRequest{}, errdefs.Public(errdefs.ErrInvalidArgument, "source_paths must not be empty")
	}
	if req.Destination == "" {
		return ComposeRequest{}, errdefs.Public(errdefs.ErrInvalidArgument, "destination is required")
	}
	return req, nil
}

// planCompose resolves the user and every path and checks the sources, in
// E2B's order, before anything is written: each source must differ from
// the destination (after resolution) and be, or link to, a regular file.
// The same source may be listed twice; it is then copied twice.
func (h *Handler) planCompose(req ComposeRequest) (*composeJob, error) {
	name := h.cfg.State.DefaultUser()
	if req.Username != nil {
		name = *req.Username
	} else if name == "" {
		return nil, errdefs.Public(errdefs.ErrInvalidArgument, "username not provided")
	}
	u, err := h.cfg.Users.Lookup(name)
	if err != nil {
		return nil, err
	}
	dest, err := h.resolve(req.Destination, u)
	if err != nil {
		return nil, errdefs.PublicWrap(err, "error resolving destination path")
	}
	job := &composeJob{u: u, dest: dest, sources: make([]string, 0, len(req.SourcePaths))}
	for _, src := range req.SourcePaths {
		abs, err := h.resolve(src, u)
		if err != nil {
			return nil, errdefs.PublicWrap(err, "error resolving source path %q", src)
		}
		if abs == dest {
			return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "source path %q cannot be the same as destination", src)
		}
		fi, err := os.Stat(abs)
		if err != nil {
			// E2B answers 404 for any stat failure, not only ENOENT.
			return nil, fmt.Errorf("%w (%w)", errdefs.Publicf(errdefs.ErrNotFound, "source file not found: %s", src), err)
		}
		if !fi.Mode().IsRegular() {
			return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "source path is not a regular file: %s", src)
		}
		job.sources = append(job.sources, abs)
	}
	return job, nil
}

// compose writes the destination of job and deletes its sources; it
// returns the size written. Past validation every failure is a 500, or a
// 507 when the disk is full, with E2B's texts.
func (h *Handler) compose(job *composeJob) (int64, error) {
	if err := h.mkdirAll(filepath.Dir(job.dest), job.u); err != nil {
		return 0, composeFailed(err, "error ensuring directories")
	}
	tmp := job.dest + ".e2b-compose." + uuid.NewString() + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return 0, composeFailed(err, "error creating destination file")
	}
	size, err := h.concat(f, tmp, job)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = composeFailed(cerr, "error closing destination file")
	}
	if err == nil {
		if rerr := os.Rename(tmp, job.dest); rerr != nil {
			err = composeFailed(rerr, "error finalizing compose")
		}
	}
	if err != nil {
		if rmErr := os.Remove(tmp); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) {
			h.log.Warn("remove compose temporary file", "path", tmp, "err", rmErr)
		}
		return 0, err
	}
	for _, src := range job.sources {
		// A source listed twice is gone the second time.
		if err := os.Remove(src); err != nil && !errors.Is(err, fs.ErrNotExist) {
			h.log.Warn("remove composed source", "path", src, "err", err)
		}
	}
	return size, nil
}

// concat gives the open temporary file f (at tmp) to the user and appends
// every source to it.
func (h *Handler) concat(f *os.File, tmp string, job *composeJob) (int64, error) {
	if err := h.cfg.Chown(tmp, job.u); err != nil {
		return 0, composeFailed(err, "error changing file ownership")
	}
	var total int64
	for _, src := range job.sources {
		n, err := appendFile(f, src)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// appendFile copies the file at src to the end of dst. *os.File.ReadFrom
// moves the bytes inside the kernel (copy_file_range) between regular files.
func appendFile(dst *os.File, src string) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, composeFailed(err, "error opening source file %s", src)
	}
	defer in.Close()
	n, err := dst.ReadFrom(in)
	if err != nil {
		return n, composeFailed(err, "error composing source %s", src)
	}
	return n, nil
}

// composeFailed is a failure after validation, in E2B's words: a full disk
// or quota is a 507 "not enough disk space available" (E2B itself only
// recognises ENOSPC), anything else a 500 "<context>: <system text>". The
// cause stays in the chain for the log, without lending its kind.
func composeFailed(cause error, format string, args ...any) error {
	if errors.Is(cause, syscall.ENOSPC) || errors.Is(cause, syscall.EDQUOT) {
		return fmt.Errorf("%w (%v)", errdefs.Public(errdefs.ErrNoSpace, "not enough disk space available"), cause)
	}
	msg := fmt.Sprintf(format, args...)
	if pub, ok := errdefs.PublicMessage(cause); ok {
		msg += ": " + pub
	} else {
		msg += ": " + errnoText(cause)
	}
	return fmt.Errorf("%w (%v)", errdefs.Public(errdefs.ErrInternal, msg), cause)
}
