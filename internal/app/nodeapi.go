package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"
)

// Roles a server takes in a cluster (--role): "api" answers the REST API
// and the sandbox proxy, sending what concerns another node on to it;
// "node" runs sandboxes that placement puts on it. The default is both,
// which alone on a host is today's single server.
type Roles struct {
	API, Node bool
}

// ParseRoles reads --role: "api", "node" or "api,node" ("" = both).
func ParseRoles(s string) (Roles, error) {
	if strings.TrimSpace(s) == "" {
		return Roles{API: true, Node: true}, nil
	}
	var r Roles
	for _, p := range strings.Split(s, ",") {
		switch strings.TrimSpace(p) {
		case "api":
			r.API = true
		case "node":
			r.Node = true
		default:
			return Roles{}, fmt.Errorf("--role %q: want api, node or api,node", s)
		}
	}
	return r, nil
}

// clustered reports whether the server takes part in a cluster: it has a
// node API (NodeAddr) or is an API server alone. Such a server sends on
// requests for other nodes' sandboxes and shares its store with other
// servers; one that is not holds its store alone (store.LockServer).
func (c *Config) clustered() bool {
	return c.NodeAddr != "" || !c.roles.Node
}

// NodeCertDir is where a node keeps the certificate `moat cluster join`
// gave it (join.KeyFile, join.CertFile, join.CAFile): pass it to the
// join's --dir.
func NodeCertDir(dataDir string) string { return filepath.Join(dataDir, "cluster-node") }

// listenNode opens the node API's listener on cfg.NodeAddr and returns it
// with the address other servers dial (the port the kernel chose for
// ":0").
func listenNode(ctx context.Context, cfg Config) (net.Listener, string, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.NodeAddr)
	if err != nil {
		return nil, "", fmt.Errorf("node API: listen %s: %w", cfg.NodeAddr, err)
	}
	host, _, _ := net.SplitHostPort(cfg.NodeAddr)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return ln, net.JoinHostPort(host, port), nil
}

// serveNode serves h, this server's own API and sandbox proxy, to the
// cluster's servers on ln with mutual TLS (HTTP/2 and HTTP/1.1); stop
// closes it.
func serveNode(ln net.Listener, h http.Handler, tc *tls.Config, log *slog.Logger) (stop func()) {
	tc = tc.Clone()
	tc.NextProtos = []string{"h2", "http/1.1"}
	srv := &http.Server{Handler: h, TLSConfig: tc, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("node API stopped", "err", err)
		}
	}()
	log.Info("node API listening (mutual TLS, cluster CA)", "addr", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			srv.Close()
		}
		<-done
	}
}
