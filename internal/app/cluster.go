package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/moatsh/moat/internal/admission"
	"github.com/moatsh/moat/internal/cluster"
	"github.com/moatsh/moat/internal/cluster/front"
	"github.com/moatsh/moat/internal/cluster/join"
	"github.com/moatsh/moat/internal/egress/tlsca"
	"github.com/moatsh/moat/internal/orchestrator"
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
	if s := cfg.Backends.Host.Scope; s != 0 {
		h += fmt.Sprintf("-s%d", s)
	}
	if err := os.WriteFile(path, []byte(h+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("node id: %w", err)
	}
	return h, nil
}

// startCluster registers this server, when it is a node or has a node
// API (an API server's serves the templates built on it), as node
// cfg.NodeID of the store's registry with its node API at addr ("" =
// none), and watches the registry for nodes whose lease ran out (package
// cluster); stop ends both.
func startCluster(ctx context.Context, cfg Config, db *store.DB, rts []runtime.Runtime, addr string,
	orch *atomic.Pointer[orchestrator.Orchestrator]) (stop func(), err error) {
	log := cfg.Logger.With("node", cfg.NodeID)
	w := &cluster.Watcher{Store: db, Log: log, Lost: func(ctx context.Context, id string) {
		if o := orch.Load(); o != nil {
			if err := o.NodeLost(ctx, id); err != nil {
				log.WarnContext(ctx, "cluster: reporting a lost node's sandboxes gone", "lost", id, "err", err)
			}
		}
	}}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.Run(ctx) }()
	stop = func() { cancel(); wg.Wait() }
	if !cfg.roles.Node && addr == "" {
		log.Info("cluster: an API server: no sandboxes here, placement uses the registry's nodes")
		return stop, nil
	}
	var names []string // an API server registers with none: its node API serves the templates built on it
	for _, rt := range rts {
		if cfg.roles.Node {
			names = append(names, rt.Name())
		}
	}
	n := store.Node{ID: cfg.NodeID, Addr: addr, Runtimes: names, CPUs: goruntime.NumCPU(), Version: version()}
	if hf, err := admission.HostFiguresFor(cfg.DataDir)(); err == nil {
		n.MemoryMB = hf.MemTotal
	}
	reg := &cluster.Registrar{Store: db, Node: n, Log: log,
		Lost: func(ctx context.Context) {
			log.WarnContext(ctx, "cluster: this node was declared lost while its sandboxes ran; killing those reported gone")
			if o := orch.Load(); o != nil {
				if err := o.KillOrphans(ctx); err != nil {
					log.WarnContext(ctx, "cluster: killing sandboxes reported gone", "err", err)
				}
			}
		},
		Warm: func() []string { // the templates of this node's ready warm members, for placement
			var ids []string
			if o := orch.Load(); o != nil {
				for _, p := range o.Pools() {
					if p.Ready > 0 {
						ids = append(ids, p.TemplateIDs...)
					}
				}
			}
			return ids
		}}
	if err := reg.Register(ctx); err != nil {
		stop()
		return nil, err
	}
	wg.Add(1)
	go func() { defer wg.Done(); reg.Run(ctx) }()
	log.Info("cluster: registered in the node registry", "runtimes", strings.Join(names, ","), "node_api", addr)
	return stop, nil
}

// nodeAPI is this server's place in a cluster: its end of the mutual TLS
// and, on a node, the node API's listener.
type nodeAPI struct {
	tls  *tls.Config  // nil: not clustered
	cert *nodeCert    // what tls presents, renewed (nil: not clustered)
	ln   net.Listener // nil: no node API
	addr string       // what other servers dial ("" = no node API)
}

// openNodeAPI sets up cfg's part in a cluster (nothing when it is not
// clustered): the TLS end and the node API's listener.
func openNodeAPI(ctx context.Context, cfg Config, is *join.Issuer) (*nodeAPI, error) {
	n := &nodeAPI{}
	if !cfg.clustered() {
		return n, nil
	}
	var err error
	if n.tls, n.cert, err = clusterTLS(cfg, is); err != nil {
		return nil, err
	}
	if cfg.NodeAddr != "" {
		if n.ln, n.addr, err = listenNode(ctx, cfg); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// front is the public listener's handler: the front door (package
// cluster/front) before local, or local alone when not clustered.
func (n *nodeAPI) front(cfg Config, local http.Handler, orch *orchestrator.Orchestrator, db *store.DB) http.Handler {
	if n.tls == nil {
		return local
	}
	return front.New(front.Config{Self: cfg.NodeID, Local: local, Node: cfg.roles.Node, Store: db, TLS: n.tls,
		Domain: cfg.Domain, Log: cfg.Logger,
		Holds: func(id string) bool { _, ok := orch.Lookup(id); return ok }})
}

// serve serves local on the node API's listener, if there is one.
func (n *nodeAPI) serve(local http.Handler, log *slog.Logger) (stop func()) {
	if n.ln == nil {
		return func() {}
	}
	stop = serveNode(n.ln, local, n.tls, log)
	n.ln = nil
	return stop
}

// close closes a listener serve did not take.
func (n *nodeAPI) close() {
	if n.ln != nil {
		n.ln.Close()
	}
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
		if r.URL.Path == join.Path || r.URL.Path == join.RenewPath {
			is.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}
