// Package files serves envd's plain-HTTP file transfer API, GET and POST
// /files, which E2B SDKs use for files.read/files.write and signed
// download/upload URLs, and POST /files/compose, which joins uploaded parts
// into one file. Transfers are streamed: neither direction holds a whole
// file in memory.
package files

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/moatsh/moat/internal/envd/paths"
	"github.com/moatsh/moat/internal/envd/signature"
	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/envd/users"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
)

// ChownFunc gives a created file or directory to u.
type ChownFunc func(path string, u *users.User) error

// Config configures the handler.
type Config struct {
	State  *state.State
	Users  *users.Resolver
	Logger *slog.Logger
	// Chown gives created files to their user (nil = os.Lchown).
	Chown ChownFunc
	// Now is the clock for signature expiry (nil = time.Now).
	Now func() time.Time
}

// Handler serves GET and POST /files (ServeHTTP) and POST /files/compose
// (Compose).
type Handler struct {
	cfg Config
	log *slog.Logger
}

// New returns the /files handler.
func New(cfg Config) *Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Chown == nil {
		cfg.Chown = func(path string, u *users.User) error {
			return os.Lchown(path, int(u.UID), int(u.GID))
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Handler{cfg: cfg, log: cfg.Logger}
}

// ServeHTTP dispatches on the method.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		h.download(w, r)
	case http.MethodPost:
		h.upload(w, r)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		WriteError(w, http.StatusMethodNotAllowed, "method not allowed")
	}
}

// authorize checks the access token header or, failing that, the signature
// for operation. It follows E2B envd: a header that is present must match.
func (h *Handler) authorize(r *http.Request, operation string) error {
	token := h.cfg.State.AccessToken()
	if token == "" {
		return nil
	}
	if got := r.Header.Get("X-Access-Token"); got != "" {
		if subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			return errdefs.Publicf(errdefs.ErrUnauthenticated, "access token present in header but does not match")
		}
		return nil
	}
	q := r.URL.Query()
	return signature.Verify(q.Get("path"), operation, q.Get("username"), token,
		q.Get("signature"), q.Get("signature_expiration"), h.cfg.Now())
}

// caller authorizes r for operation and returns the user it acts as.
func (h *Handler) caller(r *http.Request, operation string) (*users.User, error) {
	if err := h.authorize(r, operation); err != nil {
		return nil, err
	}
	return h.user(r)
}

// user resolves the username query parameter (absent = default user).
func (h *Handler) user(r *http.Request) (*users.User, error) {
	name := r.URL.Query().Get("username")
	if !r.URL.Query().Has("username") || name == "" {
		name = h.cfg.State.DefaultUser()
	}
	return h.cfg.Users.Lookup(name)
}

// resolve turns a request path into an absolute one for u.
func (h *Handler) resolve(p string, u *users.User) (string, error) {
	return paths.Resolve(p, u.Home, h.cfg.State.DefaultWorkdir())
}

// WriteError writes envd's JSON error body.
func WriteError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]any{"code": code, "message": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Del("Content-Disposition")
	w.Header().Del("Content-Encoding")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeErr writes err with the status of its kind (errhttp's table, the
// same as the REST API's) and its public text; 5xx errors are logged whole
// and answered with a generic text.
func (h *Handler) writeErr(w http.ResponseWriter, r *http.Request, err error) {
	err = fsKind(err)
	code := errhttp.ToHTTP(err)
	if code >= 500 {
		h.log.Error("files request failed", "method", r.Method, "code", code, "err", err)
	} else {
		h.log.Debug("files request rejected", "method", r.Method, "code", code, "err", err)
	}
	msg := errhttp.Message(err)
	var se *signature.Error
	if errors.As(err, &se) {
		msg = se.Error()
	}
	WriteError(w, code, msg)
}

// StatusOf is the HTTP status envd answers err with.
func StatusOf(err error) int { return errhttp.ToHTTP(fsKind(err)) }

// fsKind gives an error that still has no kind one from the system error
// it wraps, if any.
func fsKind(err error) error {
	for _, k := range errdefs.Kinds() {
		if errors.Is(err, k) {
			return err
		}
	}
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return errors.Join(err, errdefs.ErrNoSpace)
	case errors.Is(err, os.ErrPermission):
		return errors.Join(err, errdefs.ErrPermissionDenied)
	}
	return err
}
