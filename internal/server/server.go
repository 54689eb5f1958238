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
	"github.com/moatsh/moat/internal/secrets"
	"github.com/moatsh/moat/internal/server/secretapi"
	"github.com/moatsh/moat/internal/server/templateapi"
	"github.com/moatsh/moat/internal/server/volumeapi"
	"github.com/moatsh/moat/internal/volume"
	"github.com/moatsh/moat/internal/webhook"
)

// MaxBodyBytes bounds every request body.
const MaxBodyBytes = 1 << 20

// Config wires the server; every field but Logger is required.
type Config struct {
	Store  Store
	Orch   *orchestrator.Orchestrator
	Logger *slog.Logger
	// Builds enables the template build API; nil answers it with 501.
	Builds *BuildConfig
	// Volumes enables the volume API; nil answers it with 501.
	Volumes *volume.Manager
	// Secrets serves /secrets; nil answers it with 501.
	Secrets *secrets.Service
	// Webhooks serves /events (lifecycle events and webhooks, kept in
	// Store); nil answers them with 501.
	Webhooks *webhook.Service
	// NodeID is this server's node in a cluster ("" alone): the volumes
	// it creates are recorded as on it (package cluster/front sends their
	// API and the sandboxes that mount them there).
	NodeID string
}

// Server is an http.Handler for the REST API.
type Server struct {
	db   Store
	orch *orchestrator.Orchestrator
	log  *slog.Logger
	mux  *http.ServeMux

	nodeID    string           // Config.NodeID
	builds    *BuildConfig     // nil: template builds are off
	volumes   *volume.Manager  // nil: volumes are off
	vols      *volumeapi.API   // the volume API, when volumes are on
	secretAPI *secretapi.API   // the secrets API, when secrets are on
	templates *templateapi.API // the build API, when builds are on
	secrets   *secrets.Service // nil: /secrets answers 501
	webhooks  *webhook.Service // nil: /events answers 501
}

// New returns the REST handler.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{db: cfg.Store, orch: cfg.Orch, log: cfg.Logger, mux: http.NewServeMux(), builds: cfg.Builds,
		volumes: cfg.Volumes, secrets: cfg.Secrets, webhooks: cfg.Webhooks, nodeID: cfg.NodeID}
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
	s.volumeRoutes()
	m.HandleFunc("PUT /sandboxes/{id}/network", s.auth(s.withID(s.updateNetwork)))
	m.HandleFunc("GET /moat/pools", s.auth(s.listPools))
	s.secretRoutes()
	s.eventRoutes()
	// Parts of the E2B API Moat does not implement yet answer 501 rather
	// than a 404 the SDKs would read as "sandbox not found".
	// Per-sandbox ones still answer 404 for an unknown or malformed ID.
	m.HandleFunc("GET /sandboxes/metrics", s.auth(notImplemented))
	// E2B's dashboard and operator API (teams, nodes, admin, access tokens,
	// API keys): keys are made with `moat apikey create`.
	for _, p := range []string{"GET /teams", "GET /teams/{teamID}/metrics", "GET /teams/{teamID}/metrics/max",
		"GET /nodes", "GET /nodes/{nodeID}", "POST /nodes/{nodeID}", "POST /admin/teams/{teamID}/sandboxes/kill",
		"GET /admin/sandboxes/running-counts", "POST /admin/teams/{teamID}/builds/cancel",
		"POST /admin/teams/{teamID}/api-keys", "DELETE /admin/teams/{teamID}/api-keys/{apiKeyID}",
		"POST /access-tokens", "DELETE /access-tokens/{accessTokenID}"} {
		m.HandleFunc(p, s.auth(notImplemented))
	}
	s.apiKeyRoutes(m) // apikeys.go
	m.HandleFunc("GET /sandboxes/{id}/logs", s.auth(s.withID(s.logsV1)))
	m.HandleFunc("GET /v2/sandboxes/{id}/logs", s.auth(s.withID(s.logsV2)))
}

func notImplemented(w http.ResponseWriter, r *http.Request) {
	errhttp.WriteError(w, errdefs.Public(errdefs.ErrNotImplemented, r.Method+" "+r.URL.Path+" is not implemented by this server"))
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
			errhttp.WriteError(w, errdefs.WithCode(errdefs.ErrInternal, errdefs.CodeInternal))
		}
	}()
	if s.serveUpload(w, r) { // streams past MaxBodyBytes; signed, no API key
		return
	}
	if strings.HasPrefix(r.URL.Path, volumeapi.ContentPrefix) { // streams too; the volume's token, no API key
		s.vols.ServeContent(w, r)
		return
	}
	h, pattern := s.mux.Handler(r)
	if pattern == "" {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if allow := rec.Header().Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		switch {
		case rec.Code == http.StatusMethodNotAllowed:
			errhttp.Write(w, rec.Code, "method not allowed")
		case rec.Code >= 300 && rec.Code < 400:
			// The mux redirects a path with "." or ".." segments to
			// its clean form; no API path needs that, and under
			// /sandboxes/ such a segment is a malformed sandbox ID.
			s.fail(w, r, uncleanPath(r.URL.Path))
		default:
			errhttp.Write(w, rec.Code, "route not found")
		}
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	start, sw := time.Now(), &statusWriter{ResponseWriter: w, status: http.StatusOK}
	s.mux.ServeHTTP(sw, r) // sets path values, which h.ServeHTTP would not
	s.log.Debug("api request", "method", r.Method, "path", r.URL.Path, "status", sw.status,
		"duration", time.Since(start))
}

// uncleanPath is the error for a path the mux would redirect.
func uncleanPath(p string) error {
	rest, ok := strings.CutPrefix(strings.TrimPrefix(p, "/v2"), "/sandboxes/")
	if !ok {
		return errdefs.Public(errdefs.ErrNotFound, "route not found")
	}
	id, _, _ := strings.Cut(rest, "/")
	return fmt.Errorf("malformed sandbox ID: %w", orchestrator.ErrSandboxNotFound(id))
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
			errhttp.WriteError(w, errdefs.Public(errdefs.ErrUnauthenticated, "Missing API key: set the X-API-KEY header"))
			return
		}
		tm, ok, err := s.db.CheckAPIKey(r.Context(), key)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if !ok {
			errhttp.WriteError(w, errdefs.Public(errdefs.ErrUnauthenticated, "Invalid API key"))
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), teamKey{}, tm)))
	}
}

var idRE = regexp.MustCompile(`^[a-z0-9]+$`)

// ShortID accepts "<id>" or "<id>-<clientID>" (SDK 1.x) and returns the ID.
// Anything else is ErrNotFound with the text an unknown ID gets: E2B answers
// 404 for every ID it does not know, and the SDKs turn only 404 into
// SandboxNotFoundError. The check also keeps IDs that could escape a path
// (/, .., NUL) from reaching the orchestrator.
func ShortID(raw string) (string, error) {
	id, _, found := strings.Cut(raw, "-")
	if (found && strings.Contains(raw[len(id)+1:], "-")) || !idRE.MatchString(id) {
		return "", fmt.Errorf("malformed sandbox ID: %w", orchestrator.ErrSandboxNotFound(raw))
	}
	return id, nil
}

type idHandler func(w http.ResponseWriter, r *http.Request, id string)

func (s *Server) withID(h idHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := ShortID(r.PathValue("id"))
		if err != nil {
			s.fail(w, r, err)
			return
		}
		h(w, r, id)
	}
}

// fail writes err, logging it once here: server-side failures as errors,
// and client errors whose text the client does not see (it has no public
// message) at debug, so that what was held back can still be found.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := errhttp.ToHTTP(err)
	if _, public := errdefs.PublicMessage(err); status >= 500 {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	} else if !public {
		s.log.Debug("request refused", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	if status == http.StatusInternalServerError {
		err = errdefs.WithCode(err, errdefs.CodeInternal)
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
			return errdefs.Publicf(errdefs.ErrInvalidArgument, "request body is required")
		}
		return nil
	case err != nil:
		return bodyError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "invalid request body: trailing data after JSON")
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
	case errors.As(err, &te) && te.Field == "":
		// te.Type would name a Go type.
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "invalid request body: want a JSON object, not %s", te.Value)
	case errors.As(err, &te):
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "invalid request body: field %q must be %s, not %s", te.Field, te.Type, te.Value)
	default:
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "invalid request body: %v", err)
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
