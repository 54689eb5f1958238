// Package server assembles envd, the in-sandbox agent: one HTTP handler that
// serves the Connect services (process, filesystem), the plain HTTP API
// (/health, /init, /envs, /metrics, /files, /files/compose) and the cross-cutting rules of
// E2B's envd (access token, CORS, JSON errors), over HTTP/1.1 and h2c.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/envd/state"
	"github.com/moatsh/moat/internal/envd/users"
	"github.com/moatsh/moat/internal/errdefs"
)

// DefaultPort is the port E2B SDKs expect envd on.
const DefaultPort = 49983

// idleTimeout matches E2B envd's server.
const idleTimeout = 640 * time.Second

// Config configures a Server.
type Config struct {
	// Port is used when Addr is empty (0 = DefaultPort).
	Port int
	// Addr is the listen address, overriding Port (e.g. "127.0.0.1:0").
	Addr string
	// HostMode runs envd as a plain process outside a sandbox: "root" and
	// "user" are the current account with home Home, and the clock is
	// never set.
	HostMode bool
	// Home is the home directory of root and user in host mode.
	Home string
	// Logger receives envd's logs (nil = slog.Default()).
	Logger *slog.Logger
	// Internal are the E2B_* variables every process sees (E2B_SANDBOX=true,
	// E2B_SANDBOX_ID, E2B_TEMPLATE_ID).
	Internal map[string]string
}

// Service is a Connect service mounted on the server.
type Service interface {
	Handler() (string, http.Handler)
	Close()
}

// Server is envd's HTTP server.
type Server struct {
	cfg      Config
	log      *slog.Logger
	st       *state.State
	users    *users.Resolver
	services []Service
	handler  http.Handler
	metrics  *metrics

	mu  sync.Mutex
	srv *http.Server
}

// New builds envd's services and handler; it does not listen.
func New(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HostMode && cfg.Home == "" {
		return nil, fmt.Errorf("host mode needs a home directory: %w", errdefs.ErrInvalidArgument)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, st: state.New(cfg.Internal), metrics: newMetrics()}
	if cfg.HostMode {
		s.users = users.NewHostResolver(cfg.Home)
	} else {
		s.users = users.NewResolver()
	}
	s.services = newServices(s.st, s.users, s.log)
	s.handler = s.buildHandler()
	return s, nil
}

// State returns the server's state (what /init writes).
func (s *Server) State() *state.State { return s.st }

// Handler returns the complete envd handler (CORS, panic recovery, auth,
// routes), without the h2c upgrade, which Serve adds.
func (s *Server) Handler() http.Handler { return s.handler }

// Addr returns the configured listen address.
func (s *Server) Addr() string {
	if s.cfg.Addr != "" {
		return s.cfg.Addr
	}
	port := s.cfg.Port
	if port == 0 {
		port = DefaultPort
	}
	return net.JoinHostPort("", strconv.Itoa(port))
}

// Serve serves on ln until ctx is done (then shuts down gracefully) or the
// server fails. It returns nil after a graceful shutdown.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Handler:           s.handler,
		IdleTimeout:       idleTimeout,
		ReadHeaderTimeout: 30 * time.Second,
		Protocols:         &protocols,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("serve envd: %w", err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		s.log.Warn("graceful shutdown timed out; closing connections", "err", err)
		_ = srv.Close()
	}
	<-errc
	return nil
}

// Close stops serving and releases the services (their processes and
// watchers).
func (s *Server) Close() {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
	for _, svc := range s.services {
		svc.Close()
	}
}
