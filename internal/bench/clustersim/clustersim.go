// Package clustersim is `moat bench --cluster`: scale by simulation. A
// cluster's cost curve (creates per second, the API's latency and the
// PostgreSQL statements each create costs, as nodes and sandboxes grow) is
// what decides how far one shared database carries the cluster, and
// nobody has hundreds of machines to measure it on. So this package runs,
// in one process, against a real private PostgreSQL (package pgserver):
// API servers' real front doors (cluster/front, each with its own store
// connection pool and lease watcher, placing every create with
// cluster.Placement over store.NodeLoads and forwarding it over the node
// API's real mutual TLS), and N simulated nodes, each registered in the
// store with a lease it renews (cluster.Registrar) and served behind its
// own TLS listener, whose create does a real node's store work without a
// runtime (Node). Clients issue M creates through the front doors; the
// statements are counted by pg_stat_statements.
//
// What it leaves out: the runtime (a real create is mostly the sandbox's
// start), the events a real node records, each node's own connection
// pool (the simulated nodes share one: PostgreSQL could not hold 500
// pools of 16), and the network between hosts (everything is loopback on
// one machine, sharing its cores with PostgreSQL).
package clustersim

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/moatsh/moat/internal/bench"
	"github.com/moatsh/moat/internal/cluster/join"
	"github.com/moatsh/moat/internal/egress/tlsca"
	"github.com/moatsh/moat/internal/pgserver"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/store/pgsql"
)

// Config is one run.
type Config struct {
	Nodes       int // simulated nodes
	Sandboxes   int // creates issued (M)
	Fronts      int // API servers, each with its front door (default 2)
	Concurrency int // clients creating at once, over the front doors (default 32)
	// NodeMemoryMB is what each node offers (default 64 GiB: with the
	// overcommit of 4, room for 512 sandboxes of 512 MiB).
	NodeMemoryMB    int
	SandboxMemoryMB int     // the template's memory (default 512)
	Overcommit      float64 // placement's and the nodes' (default 4)
	Log             *slog.Logger
}

func (c *Config) defaults() {
	c.Fronts = cmp.Or(max(c.Fronts, 0), 2)
	c.Concurrency = cmp.Or(max(c.Concurrency, 0), 32)
	c.NodeMemoryMB = cmp.Or(max(c.NodeMemoryMB, 0), 64<<10)
	c.SandboxMemoryMB = cmp.Or(max(c.SandboxMemoryMB, 0), 512)
	if c.Overcommit <= 0 {
		c.Overcommit = 4
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
}

// Result is what a run measured.
type Result struct {
	Config
	DSN string // the run's database (the store's rows stay until Env.Close)
	// Created answered 201; Refused 503 (no node had room); Failed any
	// other answer or a transport error (FirstError is the first).
	Created, Refused, Failed int
	FirstError               string
	Took                     time.Duration
	Latency                  bench.Series // every create's, at the client, answered or not
	Stmts                    Statements
	CPU                      CPU // from the first create to the last answer
}

// PerSecond is the created sandboxes per second.
func (r Result) PerSecond() float64 {
	if r.Took <= 0 {
		return 0
	}
	return float64(r.Created) / r.Took.Seconds()
}

// Env is the private PostgreSQL the runs share (a database each) and the
// cluster CA their TLS is made from.
type Env struct {
	pg     *pgserver.Server
	admin  *sql.DB // the "postgres" database: pg_stat_statements
	caDir  string
	issuer *join.Issuer
}

// Start starts the private PostgreSQL, with pg_stat_statements loaded,
// and makes a cluster CA. Settings are extra server settings (name=value,
// e.g. fsync=on).
func Start(ctx context.Context, settings ...string) (*Env, error) {
	pg, err := pgserver.Start(ctx, pgserver.Options{Settings: append([]string{
		"shared_preload_libraries=pg_stat_statements", "max_connections=400",
		"pg_stat_statements.track_utility=on"}, settings...)})
	if err != nil {
		return nil, fmt.Errorf("cluster bench: %w", err)
	}
	e := &Env{pg: pg}
	if err := e.init(ctx); err != nil {
		e.Close()
		return nil, fmt.Errorf("cluster bench: %w", err)
	}
	return e, nil
}

func (e *Env) init(ctx context.Context) error {
	if err := e.pg.Exec(ctx, "postgres", "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return err
	}
	admin, err := pgsql.Open(e.pg.DSN("postgres"))
	if err != nil {
		return err
	}
	e.admin = admin
	if e.caDir, err = os.MkdirTemp("", "moat-clustersim-"); err != nil {
		return err
	}
	ca, err := tlsca.Open(filepath.Join(e.caDir, "cluster-ca"), "cluster")
	if err != nil {
		return err
	}
	e.issuer = &join.Issuer{CA: ca}
	return nil
}

// Close stops PostgreSQL and removes its files and the CA's.
func (e *Env) Close() {
	if e.admin != nil {
		e.admin.Close()
	}
	if e.caDir != "" {
		os.RemoveAll(e.caDir)
	}
	e.pg.Close()
}

// Run runs cfg in a new database: it registers the nodes, starts them and
// the front doors, issues the creates, and stops everything but the
// database.
func (e *Env) Run(ctx context.Context, cfg Config) (Result, error) {
	cfg.defaults()
	if cfg.Nodes <= 0 || cfg.Sandboxes <= 0 {
		return Result{}, fmt.Errorf("cluster bench: want nodes and sandboxes above 0 (have %d, %d)", cfg.Nodes, cfg.Sandboxes)
	}
	res := Result{Config: cfg}
	dsn, err := e.pg.NewDB(ctx)
	if err != nil {
		return res, fmt.Errorf("cluster bench: %w", err)
	}
	res.DSN = dsn
	key, err := setup(ctx, dsn, cfg)
	if err != nil {
		return res, fmt.Errorf("cluster bench: %w", err)
	}
	c, err := e.startCluster(ctx, dsn, cfg)
	if err != nil {
		return res, fmt.Errorf("cluster bench: %w", err)
	}
	defer c.close()
	if err := e.resetStats(ctx); err != nil {
		return res, fmt.Errorf("cluster bench: %w", err)
	}
	cfg.Log.InfoContext(ctx, "cluster bench: creating", "nodes", cfg.Nodes, "sandboxes", cfg.Sandboxes)
	start, cpu0 := time.Now(), cpuNow(e.pg.PID())
	drive(ctx, c.urls(), key, cfg, &res)
	res.Took, res.CPU = time.Since(start), cpuNow(e.pg.PID()).sub(cpu0)
	c.close() // the leases and watchers stop: nothing more is counted
	if res.Stmts, err = e.readStats(ctx, dsn); err != nil {
		return res, fmt.Errorf("cluster bench: %w", err)
	}
	return res, nil
}

// setup makes the run's schema, the template "base" and an API key, and
// returns the key.
func setup(ctx context.Context, dsn string, cfg Config) (string, error) {
	db, err := store.Open(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer db.Close()
	if err := db.UpsertTemplate(ctx, store.Template{ID: "base", Name: "base", CPUCount: 1,
		MemoryMB: cfg.SandboxMemoryMB, DiskSizeMB: 1024, EnvdVersion: "0.0.0-clustersim"}); err != nil {
		return "", err
	}
	return db.CreateAPIKey(ctx, "bench")
}

// quietLog is the error log of the in-process servers: a client that
// hangs up is no news.
func quietLog() *log.Logger { return log.New(io.Discard, "", 0) }
