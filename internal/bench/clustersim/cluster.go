package clustersim

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/cluster"
	"github.com/moatsh/moat/internal/cluster/front"
	"github.com/moatsh/moat/internal/cluster/join"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
	"github.com/moatsh/moat/internal/store"
)

// simCluster is one run's servers: the nodes (sharing nodeDB) and the API
// servers' front doors (a store each), and the goroutines that renew
// and watch leases.
type simCluster struct {
	nodes  []*Node
	nodeDB *store.DB
	fronts []*apiServer
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// apiServer is one API server: its store, front door and listener.
type apiServer struct {
	db    *store.DB
	front *front.Front
	srv   *http.Server
	url   string
}

// startCluster registers and serves cfg.Nodes nodes, then starts
// cfg.Fronts API servers; everything runs until close.
func (e *Env) startCluster(ctx context.Context, dsn string, cfg Config) (_ *simCluster, err error) {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c := &simCluster{cancel: cancel}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	if c.nodeDB, err = store.Open(ctx, dsn); err != nil {
		return nil, err
	}
	for i := range cfg.Nodes {
		if err := e.startNode(ctx, runCtx, c, fmt.Sprintf("node-%04d", i), cfg); err != nil {
			return nil, err
		}
	}
	for i := range cfg.Fronts {
		if err := e.startAPIServer(ctx, runCtx, c, fmt.Sprintf("api-%d", i), dsn, cfg); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// startNode registers node id and serves it; its registrar renews the
// lease every cluster.DefaultRenew, starting at a random point of the
// first period (real nodes do not renew in step).
func (e *Env) startNode(ctx, runCtx context.Context, c *simCluster, id string, cfg Config) error {
	tc, err := e.tlsConfig(id)
	if err != nil {
		return err
	}
	n := &Node{ID: id, Store: c.nodeDB, CapacityMB: int(float64(cfg.NodeMemoryMB) * cfg.Overcommit)}
	c.nodes = append(c.nodes, n)
	addr, err := n.Serve(tc)
	if err != nil {
		return err
	}
	reg := &cluster.Registrar{Store: c.nodeDB, Log: cfg.Log, Node: store.Node{ID: id, Addr: addr,
		Runtimes: []string{"container"}, MemoryMB: cfg.NodeMemoryMB, CPUs: 2, Version: "clustersim"}}
	if err := reg.Register(ctx); err != nil {
		return fmt.Errorf("node %s: %w", id, err)
	}
	c.wg.Go(func() {
		select {
		case <-runCtx.Done():
			return
		case <-time.After(rand.N(cluster.DefaultRenew)):
		}
		reg.Run(runCtx)
	})
	return nil
}

// startAPIServer starts API server id: its own store, a lease watcher and
// its front door (role api: it places every create on a node), served on
// a loopback listener.
func (e *Env) startAPIServer(ctx, runCtx context.Context, c *simCluster, id, dsn string, cfg Config) error {
	tc, err := e.tlsConfig(id)
	if err != nil {
		return err
	}
	db, err := store.Open(ctx, dsn)
	if err != nil {
		return err
	}
	a := &apiServer{db: db}
	c.fronts = append(c.fronts, a)
	w := &cluster.Watcher{Store: db, Log: cfg.Log}
	c.wg.Go(func() { w.Run(runCtx) })
	a.front = front.New(front.Config{Self: id, Local: http.HandlerFunc(notServed), Store: db, TLS: tc,
		Placement: cluster.Placement{Overcommit: cfg.Overcommit}, Log: cfg.Log})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("api server %s: %w", id, err)
	}
	a.url = "http://" + ln.Addr().String()
	a.srv = &http.Server{Handler: a.front, ReadHeaderTimeout: 10 * time.Second, ErrorLog: quietLog()}
	go func() {
		if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			cfg.Log.WarnContext(runCtx, "cluster bench: api server stopped", "server", id, "err", err)
		}
	}()
	return nil
}

// notServed is the simulated API servers' own API: nothing but the front
// door's work is simulated.
func notServed(w http.ResponseWriter, _ *http.Request) {
	errhttp.WriteError(w, errdefs.Publicf(errdefs.ErrNotFound, "the simulated API server forwards creates only"))
}

// tlsConfig is node or server id's end of the node API's mutual TLS.
func (e *Env) tlsConfig(id string) (*tls.Config, error) {
	key, cert, ca, err := e.issuer.Self(id)
	if err != nil {
		return nil, fmt.Errorf("certificate of %s: %w", id, err)
	}
	tc, err := join.TLSConfig(cert, key, ca)
	if err != nil {
		return nil, fmt.Errorf("certificate of %s: %w", id, err)
	}
	return tc, nil
}

func (c *simCluster) urls() []string {
	out := make([]string, len(c.fronts))
	for i, a := range c.fronts {
		out[i] = a.url
	}
	return out
}

// close stops the leases, watchers, servers and stores (once).
func (c *simCluster) close() {
	c.once.Do(func() {
		c.cancel()
		c.wg.Wait()
		for _, a := range c.fronts {
			if a.srv != nil {
				a.srv.Close()
			}
			if a.front != nil {
				a.front.Close()
			}
			a.db.Close()
		}
		for _, n := range c.nodes {
			n.Close()
		}
		if c.nodeDB != nil {
			c.nodeDB.Close()
		}
	})
}
