package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/cluster/join"
)

// nodeCert is this server's certificate in the cluster's mutual TLS and
// how it is renewed before it ends (join.RenewAt): a node that joined asks
// the API server it joined through (join.APIFile in its certificate
// directory) and keeps the new key and certificate there; a server that
// holds the cluster CA signs its own again.
type nodeCert struct {
	keeper join.Keeper
	dir    string // NodeCertDir when the node joined, else ""
	self   func() (key, cert []byte, err error)
	hc     *http.Client
	log    *slog.Logger
}

// renewRetry is how soon a failed renewal is tried again; renewCheck is
// the longest wait between looks at the certificate.
const (
	renewRetry = 5 * time.Minute
	renewCheck = time.Hour
)

// clusterTLS is this server's end of the node API's mutual TLS: the
// certificate in NodeCertDir when the node joined, else one for its node
// ID that the cluster CA in its data dir signs now (a server holding the
// CA, as the API servers do). The configuration presents whatever
// certificate the returned nodeCert holds.
func clusterTLS(cfg Config, is *join.Issuer) (*tls.Config, *nodeCert, error) {
	c := &nodeCert{hc: &http.Client{Timeout: 30 * time.Second}, log: cfg.Logger.With("node", cfg.NodeID)}
	dir := NodeCertDir(cfg.DataDir)
	key, cert, ca, err := readNodeCert(dir)
	switch {
	case err == nil:
		c.dir = dir
	case !errors.Is(err, os.ErrNotExist):
		return nil, nil, fmt.Errorf("node certificate in %s: %w", dir, err)
	default:
		if key, cert, ca, err = is.Self(cfg.NodeID); err != nil {
			return nil, nil, fmt.Errorf("node certificate: %w", err)
		}
		c.self = func() ([]byte, []byte, error) {
			key, cert, _, err := is.Self(cfg.NodeID)
			return key, cert, err
		}
	}
	if err := c.keeper.Set(cert, key); err != nil {
		return nil, nil, err
	}
	tc, err := c.keeper.Config(ca)
	return tc, c, err
}

// readNodeCert reads the key, certificate and CA a join left in dir; an
// error wraps os.ErrNotExist only when none of the three is there.
func readNodeCert(dir string) (key, cert, ca []byte, err error) {
	var pems [3][]byte
	var errs []error
	missing := 0
	for i, f := range []string{join.KeyFile, join.CertFile, join.CAFile} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		pems[i] = b
		if errors.Is(err, os.ErrNotExist) {
			missing++
		}
		errs = append(errs, err)
	}
	switch err := errors.Join(errs...); {
	case err != nil && missing < 3:
		// %v: a partial set is not "not there".
		return nil, nil, nil, fmt.Errorf("%v (all of %s, %s and %s are needed)", err, join.KeyFile, join.CertFile, join.CAFile)
	case err != nil:
		return nil, nil, nil, err
	}
	return pems[0], pems[1], pems[2], nil
}

// run renews the certificate when it is due until ctx ends.
func (c *nodeCert) run(ctx context.Context) {
	for {
		wait := time.Until(join.RenewAt(c.keeper.Leaf()))
		if wait <= 0 {
			if err := c.renew(ctx); err != nil {
				c.log.WarnContext(ctx, "cluster: renewing this node's certificate", "err", err,
					"expires", c.keeper.Leaf().NotAfter, "retry_in", renewRetry)
				wait = renewRetry
			} else {
				c.log.InfoContext(ctx, "cluster: renewed this node's certificate", "expires", c.keeper.Leaf().NotAfter)
				// Due at once again only when certificates live minutes.
				if wait = time.Until(join.RenewAt(c.keeper.Leaf())); wait <= 0 {
					wait = renewRetry
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(wait, renewCheck)):
		}
	}
}

// renew gets the next certificate and makes it current (and, for a
// joined node, writes it where the next start reads it).
func (c *nodeCert) renew(ctx context.Context) error {
	if c.self != nil {
		key, cert, err := c.self()
		if err != nil {
			return err
		}
		return c.keeper.Set(cert, key)
	}
	key, cert, ca, err := readNodeCert(c.dir)
	if err != nil {
		return err
	}
	u, err := os.ReadFile(filepath.Join(c.dir, join.APIFile))
	if err != nil {
		return fmt.Errorf("the API server to renew with: %w (join again with moat cluster join, which writes it)", err)
	}
	key2, cert2, ca2, err := join.AskRenew(ctx, c.hc, strings.TrimSpace(string(u)), cert, key)
	if err != nil {
		return err
	}
	if h1, h2 := caHash(ca), caHash(ca2); h1 != h2 {
		return fmt.Errorf("renew: %s answered with another cluster CA (SHA-256 %s, this node's is %s): refused", u, h2, h1)
	}
	if err := c.keeper.Set(cert2, key2); err != nil {
		return err
	}
	return join.SaveRenewed(c.dir, key2, cert2)
}

func caHash(ca []byte) string { h, _ := join.CAHash(ca); return h }

// renewCerts runs the renewal of this server's node certificate, when it
// is clustered, until the returned stop is called.
func (n *nodeAPI) renewCerts(ctx context.Context) (stop func()) {
	if n.cert == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { n.cert.run(ctx) })
	return func() { cancel(); wg.Wait() }
}
