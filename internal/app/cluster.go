package app

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/moatsh/moat/internal/admission"
	"github.com/moatsh/moat/internal/cluster"
	"github.com/moatsh/moat/internal/cluster/join"
	"github.com/moatsh/moat/internal/egress/tlsca"
	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/store"
)

// NodeIDFile holds a data dir's node ID: written at the first start from
// the host name (with "-s<scope>" for a scoped server), so that a later
// change of the host name does not make the host another node whose
// sandboxes it would not reconcile.
const NodeIDFile = "node-id"

// nodeID is the ID this server registers under: cfg.NodeID, else the one
// in the data dir (NodeIDFile), made now if there is none.
func nodeID(cfg Config) (string, error) {
	if cfg.NodeID != "" {
		return cfg.NodeID, nil
	}
	path := filepath.Join(cfg.DataDir, NodeIDFile)
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b)), nil
	}
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "localhost"
	}
	if s := cfg.Backends.Scope; s != 0 {
		h += fmt.Sprintf("-s%d", s)
	}
	if err := os.WriteFile(path, []byte(h+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("node id: %w", err)
	}
	return h, nil
}

// startCluster registers this server as node cfg.NodeID of the store's
// registry and watches the registry for nodes whose lease ran out
// (package cluster); stop ends both. A server is today both the API and the node
// of its sandboxes (docs/cluster.md says what the roles become).
func startCluster(ctx context.Context, cfg Config, db *store.DB, rts []runtime.Runtime) (stop func(), err error) {
	var names []string
	for _, rt := range rts {
		names = append(names, rt.Name())
	}
	n := store.Node{ID: cfg.NodeID, Addr: cfg.Addr, Runtimes: names, CPUs: goruntime.NumCPU(), Version: version()}
	if hf, err := admission.HostFiguresFor(cfg.DataDir)(); err == nil {
		n.MemoryMB = hf.MemTotal
	}
	log := cfg.Logger.With("node", n.ID)
	reg := &cluster.Registrar{Store: db, Node: n, Log: log,
		Lost: func(ctx context.Context) {
			log.WarnContext(ctx, "cluster: this node was declared lost while its sandboxes ran; they are kept (one server per store today)")
		}}
	if err := reg.Register(ctx); err != nil {
		return nil, err
	}
	w := &cluster.Watcher{Store: db, Log: log}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); reg.Run(ctx) }()
	go func() { defer wg.Done(); w.Run(ctx) }()
	log.Info("cluster: registered in the node registry", "runtimes", strings.Join(names, ","))
	return func() { cancel(); wg.Wait() }, nil
}

// version is this binary's module version ("(devel)" for a local build).
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// ClusterCADir is where a server keeps the cluster's CA, which signs the
// certificates of nodes that join (package cluster/join). Every API
// server of a cluster needs the same one: copy the directory, as
// secrets.key.
func ClusterCADir(dataDir string) string { return filepath.Join(dataDir, "cluster-ca") }

// joinIssuer is the cluster CA's issuer of node certificates for join
// tokens.
func joinIssuer(cfg Config, db *store.DB) (*join.Issuer, error) {
	ca, err := tlsca.Open(ClusterCADir(cfg.DataDir), "cluster")
	if err != nil {
		return nil, err
	}
	return &join.Issuer{CA: ca, Tokens: db}, nil
}

// withJoin serves join.Path with is and everything else with api.
func withJoin(api http.Handler, is *join.Issuer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == join.Path {
			is.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}
