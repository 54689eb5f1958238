package app

import (
	"context"
	"fmt"
	"net/http"

	"github.com/moatsh/moat/internal/admission"
	"github.com/moatsh/moat/internal/dialrace"
	"github.com/moatsh/moat/internal/metrics"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/proxy"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/webhook"
)

// startMetrics serves /metrics on cfg.MetricsAddr and prints "metrics
// listening on ADDR". With no address it returns nil metrics, whose
// middleware passes requests through.
func startMetrics(ctx context.Context, cfg Config, db *store.DB, orch *orchestrator.Orchestrator,
	hooks *webhook.Service) (*metrics.Metrics, func(), error) {
	if cfg.MetricsAddr == "" {
		return nil, func() {}, nil
	}
	capacity := cfg.Capacity
	if capacity.Host == nil {
		capacity.Host = admission.HostFiguresFor(cfg.DataDir)
	}
	m := metrics.New(metrics.Config{EnvdPort: cfg.EnvdPort, Domain: cfg.Domain, Logger: cfg.Logger,
		Sources: metrics.Sources{
			Sandboxes: func(ctx context.Context) ([]store.Sandbox, error) {
				return db.ListSandboxes(ctx, store.SandboxFilter{NodeID: cfg.NodeID})
			},
			Admission:     orch.Admission(),
			Pools:         orch.Pools,
			Reserved:      orch.Reserved,
			Limit:         capacity.Limit,
			Deliveries:    hooks.Deliveries,
			ConnectStalls: dialrace.Stalls,
		}})
	addr, stop, err := m.Listen(ctx, cfg.MetricsAddr)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(cfg.Stderr, "metrics listening on %s\n", addr)
	return m, stop, nil
}

// sandboxProxy is the proxy with its traffic counted.
type sandboxProxy struct {
	*proxy.Proxy
	h http.Handler
}

func (p sandboxProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.h.ServeHTTP(w, r) }

// countedProxy wraps px's handler in m's proxy metrics.
func countedProxy(m *metrics.Metrics, px *proxy.Proxy) sandboxProxy {
	return sandboxProxy{Proxy: px, h: m.Proxy(px)}
}
