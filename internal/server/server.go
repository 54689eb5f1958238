// Package server is Moat's control-plane REST API: the E2B OpenAPI surface
// the official SDKs call (sandboxes, templates), with X-API-KEY auth and
// E2B's JSON error bodies. It validates and converts wire types; the
// orchestrator does the work.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/store"
)

// MaxBodyBytes bounds every request body.
const MaxBodyBytes = 1 << 20

// Config wires the server; every field but Logger is required.
type Config struct {
	Store  *store.DB
	Orch   *orchestrator.Orchestrator
	Logger *slog.Logger
	// Builds enables the template build API; nil answers it with 501.
	Builds *BuildConfig
}

// Server is an http.Handler for the REST API.
type Server struct {
	db   *store.DB
	orch *orchestrator.Orchestrator
	log  *slog.Logger
	mux  *http.ServeMux

	builds *BuildConfig // nil: template builds are off
}

// New returns the REST handler.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{db: cfg.Store, orch: cfg.Orch, log: cfg.Logger, mux: http.NewServeMux(), builds: cfg.Builds}
	if s.builds != nil {
		s.builds.fill()
	}
	s.routes()
	return s
}

func (s *Server) routes() {
	m := s.mux
	m.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		errhttp.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	m.HandleFunc("POST /sandboxes", s.auth(s.createV1))
	m.HandleFunc("POST /v2/sandboxes", s.auth(s.createV2))
	m.HandleFunc("GET /sandboxes", s.auth(s.listV1))
	m.HandleFunc("GET /v2/sandboxes", s.auth(s.listV2))
	m.HandleFunc("GET /sandboxes/{id}", s.auth(s.withID(s.get)))
	m.HandleFunc("DELETE /sandboxes/{id}", s.auth(s.withID(s.kill)))
	m.HandleFunc("POST /sandboxes/{id}/timeout", s.auth(s.withID(s.setTimeout)))
	m.HandleFunc("POST /sandboxes/{id}/refreshes", s.auth(s.withID(s.refresh)))
	m.HandleFunc("POST /sandboxes/{id}/pause", s.auth(s.withID(s.pause)))
	m.HandleFunc("POST /sandboxes/{id}/resume", s.auth(s.withID(s.resume)))
	m.HandleFunc("POST /sandboxes/{id}/connect", s.auth(s.withID(s.connectV1)))
	m.HandleFunc("POST /v2/sandboxes/{id}/connect", s.auth(s.withID(s.connectV2)))
	m.HandleFunc("GET /sandboxes/{id}/metrics", s.auth(s.withID(s.metrics)))
	m.HandleFunc("GET /templates", s.auth(s.listTeamTemplates))
	m.HandleFunc("GET /v2/templates", s.auth(s.listTeamTemplates))
	m.HandleFunc("POST /sandboxes/{id}/snapshots", s.auth(s.withID(s.createSnapshot)))
	m.HandleFunc("GET /snapshots", s.auth(s.listSnapshots))
	m.HandleFunc("POST /sandboxes/{id}/fork", s.auth(s.withID(s.fork)))
	m.HandleFunc("DELETE /templates/{id}", s.auth(s.deleteTeamTemplate))
	s.buildRoutes()
	m.HandleFunc("PUT /sandboxes/{id}/network", s.auth(s.withID(s.updateNetwork)))
	m.HandleFunc("GET /moat/pools", s.auth(s.listPools))
	// Parts of the E2B API Moat does not implement yet answer 501 rather
	// than a 404 the SDKs would read as "sandbox not found".
	for _, p := range []string{"GET /sandboxes/{id}/logs",
		"GET /v2/sandboxes/{id}/logs", "GET /sandboxes/metrics"} {
		m.HandleFunc(p, s.auth(notImplemented))
	}
}

func notImplemented(w http.ResponseWriter, r *http.Request) {
	errhttp.Write(w, http.StatusNotImplemented, r.Method+" "+r.URL.Path+" is not implemented by this server")
}

// ServeHTTP recovers panics into 500 JSON and turns the mux's plain-text
// 404/405 answers into E2B JSON errors.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("panic in handler", "method", r.Method, "path", r.URL.Path, "panic", v)
			errhttp.Write(w, http.StatusInternalServerError, "internal server error")
		}
	}()
	if s.serveUpload(w, r) { // streams past MaxBodyBytes; signed, no API key
		return
	}
	h, pattern := s.mux.Handler(r)
	if pattern == "" {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if allow := rec.Header().Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		msg := "route not found"
		if rec.Code == http.StatusMethodNotAllowed {
			msg = "method not allowed"
		}
		errhttp.Write(w, rec.Code, msg)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	start, sw := time.Now(), &statusWriter{ResponseWriter: w, status: http.StatusOK}
	s.mux.ServeHTTP(sw, r) // sets path values, which h.ServeHTTP would not
	s.log.Debug("api request", "method", r.Method, "path", r.URL.Path, "status", sw.status,
		"duration", time.Since(start))
}

// statusWriter remembers the status for the access log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// teamKey is the request-context key of the caller's team.
type teamKey struct{}

// team is the team of the request's API key, set by auth; "" (which owns
// nothing in the orchestrator) on a route without auth.
func team(r *http.Request) string {
	t, _ := r.Context().Value(teamKey{}).(string)
	return t
}

// auth requires a valid X-API-KEY and puts its team in the request's
// context: handlers pass team(r) to every orchestrator call, which then
// sees only that team's sandboxes and snapshots.
func (s *Server) auth(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-API-KEY")
		if key == "" {
			errhttp.Write(w, http.StatusUnauthorized, "Missing API key: set the X-API-KEY header")
			return
		}
		tm, ok, err := s.db.CheckAPIKey(r.Context(), key)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if !ok {
			errhttp.Write(w, http.StatusUnauthorized, "Invalid API key")
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), teamKey{}, tm)))
	}
}

var idRE = regexp.MustCompile(`^[a-z0-9]+$`)

// ShortID accepts "<id>" or "<id>-<clientID>" (SDK 1.x) and returns the ID.
func ShortID(raw string) (string, error) {
	id, _, found := strings.Cut(raw, "-")
	if found && strings.Contains(raw[len(id)+1:], "-") {
		return "", fmt.Errorf("invalid sandbox ID %q: %w", raw, errdefs.ErrInvalidArgument)
	}
	if !idRE.MatchString(id) {
		return "", fmt.Errorf("invalid sandbox ID %q: %w", raw, errdefs.ErrInvalidArgument)
	}
	return id, nil
}

type idHandler func(w http.ResponseWriter, r *http.Request, id string)

func (s *Server) withID(h idHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := ShortID(r.PathValue("id"))
		if err != nil {
			errhttp.WriteError(w, err)
			return
		}
		h(w, r, id)
	}
}

// fail writes err, logging server-side failures once here.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := errhttp.ToHTTP(err)
	if status >= 500 {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	errhttp.WriteError(w, err)
}

// decode reads a JSON body into v. An empty body is an error only when required.
func decode(r *http.Request, v any, required bool) error {
	dec := json.NewDecoder(r.Body)
	err := dec.Decode(v)
	switch {
	case errors.Is(err, io.EOF):
		if required {
			return fmt.Errorf("request body is required: %w", errdefs.ErrInvalidArgument)
		}
		return nil
	case err != nil:
		return bodyError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("invalid request body: trailing data after JSON: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

var errTooLarge = errors.New("request body too large")

func bodyError(err error) error {
	var mbe *http.MaxBytesError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &mbe):
		return fmt.Errorf("%w: limit is %d bytes", errTooLarge, mbe.Limit)
	case errors.As(err, &te):
		return fmt.Errorf("invalid request body: field %q must be %s, not %s: %w", te.Field, te.Type, te.Value, errdefs.ErrInvalidArgument)
	default:
		return fmt.Errorf("invalid request body: %v: %w", err, errdefs.ErrInvalidArgument)
	}
}

// writeBodyErr writes a decode error (413 for oversize bodies).
func (s *Server) writeBodyErr(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errTooLarge) {
		errhttp.Write(w, http.StatusRequestEntityTooLarge, err.Error())
		return
	}
	s.fail(w, r, err)
}
