// Package metrics exports `moat serve`'s Prometheus metrics (series named
// moat_*; docs/metrics.md lists them). It exists so that operators can see
// what a server holds and how its operations fare without reading logs:
// the sandboxes it runs, how long creates take and how often they fail,
// how full admission's queue and the host's reservations are, the warm
// pools, the sandbox proxy's traffic and webhook deliveries.
//
// Counters and histograms are kept by HTTP middleware (API and Proxy);
// the rest is read from the server's parts at scrape time (collector.go).
// The metrics are served on a listener of their own (Listen), never on the
// public API's.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/moatsh/moat/internal/admission"
	"github.com/moatsh/moat/internal/orchestrator/warmpool"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/webhook"
)

// Sources are the parts of the server read at scrape time; a nil field's
// series are left out.
type Sources struct {
	// Sandboxes lists the store's rows of this node (at most one call a
	// scrape).
	Sandboxes func(ctx context.Context) ([]store.Sandbox, error)
	Admission *admission.Controller
	Pools     func() []warmpool.Status
	// Reserved is what live sandboxes reserve on the host; Limit is what
	// they may reserve in all (admission.Capacity.Limit).
	Reserved   func() admission.Need
	Limit      func() (admission.Need, error)
	Deliveries func() webhook.DeliveryCounts
	// ConnectStalls counts the process's stalled connects to sandboxes
	// (dialrace.Stalls).
	ConnectStalls func() uint64
}

// Config configures the metrics.
type Config struct {
	Sources Sources
	// EnvdPort tells envd's proxy traffic from other ports' (default 49983).
	EnvdPort int
	Domain   string // the proxy's sandbox host domain ("" = any)
	Logger   *slog.Logger
}

// Metrics holds the registry and the instruments the middleware feeds.
// A nil *Metrics is valid: its middleware passes requests through.
type Metrics struct {
	cfg Config
	reg *prometheus.Registry

	opDuration  *prometheus.HistogramVec
	apiRequests *prometheus.CounterVec
	pxRequests  *prometheus.CounterVec
	pxBytes     *prometheus.CounterVec
}

// New returns the metrics with every series registered.
func New(cfg Config) *Metrics {
	if cfg.EnvdPort == 0 {
		cfg.EnvdPort = 49983
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Metrics{cfg: cfg, reg: prometheus.NewRegistry(),
		opDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "moat_operation_duration_seconds",
			Help:    "Time the API took to answer a sandbox or build operation, by operation and result (ok: 2xx/3xx).",
			Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"operation", "result"}),
		apiRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "moat_api_requests_total",
			Help: "REST API requests answered, by operation and status class.",
		}, []string{"operation", "code"}),
		pxRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "moat_proxy_requests_total",
			Help: "Sandbox proxy requests answered, by port kind (envd or other) and status class.",
		}, []string{"port", "code"}),
		pxBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "moat_proxy_response_bytes_total",
			Help: "Response body bytes the sandbox proxy sent to clients, by port kind.",
		}, []string{"port"}),
	}
	m.reg.MustRegister(m.opDuration, m.apiRequests, m.pxRequests, m.pxBytes,
		&collector{src: cfg.Sources, log: cfg.Logger},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is the registry the series are in.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in Prometheus' text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(m.cfg.Logger.Handler(), slog.LevelWarn)})
}

// Listen serves /metrics on addr (HOST:PORT) until ctx ends or stop is
// called, and returns the address it listens on.
func (m *Metrics) Listen(ctx context.Context, addr string) (bound net.Addr, stop func(), err error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(m.cfg.Logger.Handler(), slog.LevelDebug)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.cfg.Logger.Error("metrics listener", "err", err)
		}
	}()
	stopCtx, cancel := context.WithCancel(ctx)
	go func() { <-stopCtx.Done(); srv.Close() }()
	return ln.Addr(), func() { cancel(); <-done }, nil
}
