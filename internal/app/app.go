// Package app assembles `moat serve`: store, runtime, orchestrator, REST
// API and sandbox proxy on one listener (HTTP/1.1 and h2c). cmd/moat only
// parses flags and calls into this package; it also blank-imports the
// runtime backends, which register themselves by name.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/moatsh/moat/internal/admission"
	"github.com/moatsh/moat/internal/build"
	"github.com/moatsh/moat/internal/cloexec"
	"github.com/moatsh/moat/internal/console"
	"github.com/moatsh/moat/internal/events"
	"github.com/moatsh/moat/internal/netpolicy"
	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/proxy"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/secrets"
	"github.com/moatsh/moat/internal/server"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/store/pgsql"
	"github.com/moatsh/moat/internal/template"
	"github.com/moatsh/moat/internal/volume"
	"github.com/moatsh/moat/internal/webhook"
)

// Config is `moat serve`'s configuration. DataDir is required.
type Config struct {
	Addr    string // listen address (default "127.0.0.1:3000")
	DataDir string // holds moat.db and the runtime's state
	// Store is where state lives: "" for <DataDir>/moat.db (SQLite), or a
	// postgres:// URL (see StoreLocation).
	Store      string
	Runtime    string        // backend name, or names side by side: "container,gvisor,vm" (the first is the default; default "container")
	MaxTimeout time.Duration // longest sandbox lifetime (default 24 h)
	Domain     string        // sandbox host domain for "{port}-{id}.{domain}" routing ("" = any)
	Logger     *slog.Logger

	// HostLock is the host-wide lock file (default DefaultHostLock): one
	// server per host, since host object names are global. Only tests whose
	// runtime touches no host object (fakes) may point it elsewhere.
	HostLock string

	// Admission bounds the heavy operations run at once (Room is filled in
	// from Capacity); Capacity is the host model behind 503s. Zero values
	// take the packages' defaults.
	Admission admission.Config
	Capacity  admission.Capacity

	// Pools keeps warm sandboxes per template (orchestrator.PoolSpec).
	Pools []orchestrator.PoolSpec

	Stdout, Stderr io.Writer // default os.Stdout / os.Stderr
	EnvdPort       int       // envd's port in sandboxes (default 49983; tests change it)
	// EnvdPath is the envd binary installed into templates built over the
	// API ("" = template.FindEnvd's search; without one, builds answer 503).
	EnvdPath string

	// Backends are the runtime backends' settings (OCI runtime, runsc,
	// microVM accelerator, ...; zero values are their defaults) and the
	// host scope (backends_linux.go).
	Backends Backends
	// DNSUpstream overrides the resolvers the egress resolver forwards
	// allowed names to: comma-separated ip or ip:port (tests point it at a
	// simulated internet). "" = the host's /etc/resolv.conf.
	DNSUpstream string
	// EgressUpstreamCA is a PEM file of more roots (a private CA, a test
	// CA) that requests with network.rules headers may be forwarded to, on
	// top of the system pool ("" = the system pool only).
	EgressUpstreamCA string
	// NodeID is this server's ID in the store's node registry (package
	// cluster; default: the one in DATA-DIR/node-id, written at the first
	// start from the host name, "-s<scope>" added for a scoped server).
	NodeID string
	// Role is what the server does in a cluster (ParseRoles: "api",
	// "node" or "api,node"; "" = both).
	Role  string
	roles Roles
	// NodeAddr is where the node API listens (HOST:PORT, mutual TLS under
	// the cluster CA; docs/cluster.md), the address other servers dial:
	// "" = none (a server alone, holding its store).
	NodeAddr string
	// WebhookAllow are networks webhook deliveries may reach although they
	// are not public (loopback, private, this host's addresses: refused
	// otherwise; see package webhook).
	WebhookAllow []netip.Prefix
	// MetricsAddr is where /metrics listens (HOST:PORT; "" = off), apart
	// from the API's listener (metrics.go).
	MetricsAddr string
}

// Validate fills defaults and checks required fields.
func (c *Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("app: DataDir is required")
	}
	if c.Addr == "" {
		c.Addr = "127.0.0.1:3000"
	}
	if c.Runtime == "" {
		c.Runtime = "container"
	}
	if c.MaxTimeout <= 0 {
		c.MaxTimeout = orchestrator.DefaultMaxTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if c.Stdout == nil {
		c.Stdout = os.Stdout
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	if c.Backends.Host.Scope < 0 || c.Backends.Host.Scope > runtime.MaxScope {
		return fmt.Errorf("app: scope %d: want 0 (the host's) to %d", c.Backends.Host.Scope, runtime.MaxScope)
	}
	if c.HostLock == "" {
		c.HostLock = DefaultHostLock
		if c.Backends.Host.Scope != 0 {
			// One server per scope: the scope's names are its own.
			c.HostLock = strings.TrimSuffix(DefaultHostLock, ".lock") + fmt.Sprintf("-s%d.lock", c.Backends.Host.Scope)
		}
	}
	if c.EnvdPort == 0 {
		c.EnvdPort = orchestrator.DefaultEnvdPort
	}
	var err error
	if c.roles, err = ParseRoles(c.Role); err != nil {
		return fmt.Errorf("app: %w", err)
	}
	return nil
}

// Serve runs the server until ctx is cancelled, then shuts down gracefully.
// Sandboxes keep running across restarts; the next Serve adopts them.
func Serve(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := cfg.Logger
	// cmd/moat does this first thing; a program embedding Serve may not have.
	if err := cloexec.MarkInherited(); err != nil {
		return err
	}
	if err := SecureDataDir(cfg.DataDir); err != nil {
		return err
	}
	unlock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer unlock()
	unlockHost, err := lockHost(cfg.HostLock, cfg.DataDir)
	if err != nil {
		return err
	}
	defer unlockHost()
	db, err := openStore(ctx, StoreLocation(cfg.DataDir, cfg.Store))
	if err != nil {
		return err
	}
	defer db.Close()
	if !cfg.clustered() { // nodeapi.go
		unlockStore, err := db.LockServer(ctx)
		if err != nil {
			return err
		}
		defer unlockStore()
	}

	secretSvc := secrets.NewService(db, secretsKeyring(cfg.DataDir))
	stopEgress, egressCA, err := startEgress(log, cfg, secretSvc)
	if err != nil {
		return err
	}
	defer stopEgress()
	rts, closeRuntimes, err := openRuntimes(ctx, cfg.Runtime, runtime.Config{DataDir: cfg.DataDir, Logger: log, Host: cfg.Backends.Host}, cfg.Backends)
	if err != nil {
		return err
	}
	defer closeRuntimes()
	log.Info("using runtime", "runtime", rts[0].Name(), "enabled", cfg.Runtime, "available", runtime.Names())
	hooks := webhook.New(webhook.Config{Store: db, Logger: log, Allow: cfg.WebhookAllow, Poll: webhookPoll(cfg)})
	if cfg.NodeID, err = nodeID(cfg); err != nil { // cluster.go
		return err
	}
	joins, err := joinIssuer(cfg, db)
	if err != nil {
		return err
	}
	node, err := openNodeAPI(ctx, cfg, joins) // cluster.go
	if err != nil {
		return err
	}
	defer node.close()
	defer node.renewCerts(ctx)()                          // certrenew.go
	var orchRef atomic.Pointer[orchestrator.Orchestrator] // for the cluster's callbacks, set below
	stopCluster, err := startCluster(ctx, cfg, db, rts, node.addr, &orchRef)
	if err != nil {
		return err
	}
	defer stopCluster()
	orch, err := newOrchestrator(cfg, newNodeTemplates(cfg, db, node.tls), rts, egressCA, hooks.Record)
	if err != nil {
		return err
	}
	if err := orch.Recover(ctx); err != nil {
		return err
	}
	orchRef.Store(orch)
	if err := ensureAPIKey(ctx, db, cfg.Stdout); err != nil {
		return err
	}
	runCtx, stopReaper := context.WithCancel(ctx)
	defer stopReaper()
	runDone, hooksDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(runDone); orch.Run(runCtx) }()
	// One server of a cluster delivers webhooks (every server records events).
	go func() {
		defer close(hooksDone)
		runLed(runCtx, db, store.WebhookLeadKey, "webhook deliveries", log, hooks.Run)
	}()
	orch.StartPools(runCtx)
	// Before the store closes: the pools kill their members, and Run's
	// timeouts and process watches finish what they started.
	defer func() { stopReaper(); orch.WaitPools(); <-runDone; <-hooksDone }()

	builds, err := newBuilds(ctx, cfg, db, buildRuntime(ctx, rts, log))
	if err != nil {
		return err
	}
	defer builds.Manager.Close()
	gc := &collector{log: log, dataDir: cfg.DataDir, db: db, orch: orch, builds: builds}
	waitGC := startGC(runCtx, gcInterval, gc.collect)
	// Before the build manager and the store close: a collection running
	// finishes first.
	defer func() { stopReaper(); waitGC() }()
	vols, err := volume.New(cfg.DataDir)
	if err != nil {
		return err
	}
	defer func() {
		if err := vols.Close(); err != nil {
			log.Warn("volumes stay mounted", "err", err)
		}
	}()
	sc := server.Config{Store: db, Orch: orch, Logger: log, Builds: builds, Volumes: vols, Secrets: secretSvc, Webhooks: hooks}
	if cfg.clustered() { // the front door sends a volume's traffic to its node
		sc.NodeID = cfg.NodeID
	}
	api := server.New(sc)
	if err := recoverVolumes(ctx, db, api, cfg.NodeID); err != nil { // volumes.go
		log.Warn("volumes of recovered sandboxes", "err", err)
	}
	mx, stopMetrics, err := startMetrics(ctx, cfg, db, orch, hooks) // metrics.go
	if err != nil {
		return err
	}
	defer stopMetrics()
	px := proxy.New(proxy.Config{Resolver: resolver{orch}, Domain: cfg.Domain, EnvdPort: cfg.EnvdPort, Logger: log,
		Explain: netpolicy.Explain})
	orch.OnRemove(px.CloseSandbox) // a removed sandbox's streams end at once
	orch.OnKill(px.CloseSandbox)   // and before a kill, while the sandbox can still take the resets
	local := localHandler(console.Mount(withJoin(mx.API(api), joins)), countedProxy(mx, px))
	srv := newHTTPServer(node.front(cfg, local, orch, db), log)
	defer node.serve(serveArtefacts(db, cfg.NodeID, clusterTemplatesDir(cfg.DataDir), local), log)()
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Addr, err)
	}
	fmt.Fprintf(cfg.Stderr, "moat listening on %s\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	log.Info("moat stopped")
	return nil
}

// newBuilds sets up E2B's template build API: builds run in this process
// and write templates under cfg.DataDir.
// RUN and COPY steps run in build sandboxes of brt (see buildRuntime);
// without one they are refused.
func newBuilds(ctx context.Context, cfg Config, db *store.DB, brt runtime.Runtime) (*server.BuildConfig, error) {
	envd, err := template.FindEnvd(cfg.EnvdPath)
	if err != nil {
		cfg.Logger.Warn("template builds over the API are unavailable", "err", err)
		envd = ""
	}
	bc := build.Config{DB: db, DataDir: cfg.DataDir, EnvdPath: envd, Logger: cfg.Logger}
	if cfg.clustered() { // other nodes copy what is built here (nodeapi.go)
		bc.NodeID = cfg.NodeID
	}
	if runner, err := build.NewSandboxRunner(brt, cfg.EnvdPort, cfg.Logger); err != nil {
		bc.NoRunner = err
	} else {
		bc.Runner = runner
	}
	m, err := build.New(ctx, bc)
	if err != nil {
		return nil, err
	}
	return &server.BuildConfig{Manager: m, DataDir: cfg.DataDir}, nil
}

func ensureAPIKey(ctx context.Context, db *store.DB, out io.Writer) error {
	n, err := db.CountAPIKeys(ctx)
	if err != nil || n > 0 {
		return err
	}
	key, err := db.CreateAPIKey(ctx, store.DefaultTeam)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Created API key: %s\n", key)
	return nil
}

// localHandler serves sandbox traffic (what px matches) and the API.
func localHandler(api http.Handler, px sandboxProxy) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if px.Match(r) {
			px.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// newHTTPServer serves h on the public listener, HTTP/1.1 and h2c.
func newHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           h,
		Protocols:         &protocols,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}

// newOrchestrator builds the orchestrator with admission control: at most
// cfg.Admission.Concurrency heavy operations at once, and creates refused
// (503) once the live sandboxes' reservations fill cfg.Capacity's model of
// the host.
func newOrchestrator(cfg Config, db orchestrator.Store, rts []runtime.Runtime, egressCA []byte,
	onEvent func(context.Context, events.Event)) (*orchestrator.Orchestrator, error) {
	var orch *orchestrator.Orchestrator
	capacity := cfg.Capacity
	capacity.Reserved = func() admission.Need { return orch.Reserved() }
	if capacity.Host == nil {
		capacity.Host = admission.HostFiguresFor(cfg.DataDir)
	}
	adm := cfg.Admission
	adm.Room = capacity.Room
	orch, err := orchestrator.New(orchestrator.Config{Store: db, Runtimes: rts, Logger: cfg.Logger,
		MaxTimeout: cfg.MaxTimeout, EnvdPort: cfg.EnvdPort, Admission: admission.New(adm), Pools: cfg.Pools, EgressCA: egressCA,
		Events: onEvent, NodeID: cfg.NodeID})
	if err != nil {
		return nil, err
	}
	return orch, nil
}

// StoreEnv names the environment variable the CLI's commands read the
// store's location from when they are not given one.
const StoreEnv = "MOAT_STORE"

// StoreLocation is where the state of a server with dataDir lives: loc if
// set, else $MOAT_STORE, else <dataDir>/moat.db. loc and $MOAT_STORE are a
// SQLite file or a postgres:// URL.
func StoreLocation(dataDir, loc string) string {
	if loc != "" {
		return loc
	}
	if v := os.Getenv(StoreEnv); v != "" {
		return v
	}
	return filepath.Join(dataDir, "moat.db")
}

// openStore opens the store at loc (StoreLocation), making a SQLite file's
// directory first.
func openStore(ctx context.Context, loc string) (*store.DB, error) {
	if !pgsql.IsDSN(loc) {
		if err := os.MkdirAll(filepath.Dir(loc), 0o711); err != nil {
			return nil, fmt.Errorf("data dir: %w", err)
		}
	}
	return store.Open(ctx, loc)
}

// CreateAPIKey adds an API key of team (store.DefaultTeam when "") to the
// store in dataDir and returns it. The team name is checked before the
// store is opened, so a bad name creates nothing.
func CreateAPIKey(ctx context.Context, dataDir, team string) (string, error) {
	if team == "" {
		team = store.DefaultTeam
	}
	if err := store.ValidateTeam(team); err != nil {
		return "", err
	}
	db, err := openStore(ctx, StoreLocation(dataDir, ""))
	if err != nil {
		return "", err
	}
	defer db.Close()
	return db.CreateAPIKey(ctx, team)
}

// ListTemplates returns the templates in the store in dataDir.
func ListTemplates(ctx context.Context, dataDir string) ([]store.Template, error) {
	db, err := openStore(ctx, StoreLocation(dataDir, ""))
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return db.ListTemplates(ctx)
}

// resolver gives the proxy the orchestrator's routes.
type resolver struct{ o *orchestrator.Orchestrator }

func (r resolver) Lookup(id string) (proxy.Target, bool) {
	rt, ok := r.o.Lookup(id)
	return target(rt), ok
}

func (r resolver) Wake(ctx context.Context, id string) (proxy.Target, error) {
	rt, err := r.o.Wake(ctx, id)
	return target(rt), err
}

// target is the proxy's copy of a route.
func target(rt orchestrator.Route) proxy.Target {
	return proxy.Target{Addr: rt.Addr, Token: rt.Token, State: string(rt.State), AutoResume: rt.AutoResume, Gen: rt.Gen,
		TrafficToken: rt.TrafficToken}
}
