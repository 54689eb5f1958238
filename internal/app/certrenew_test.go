package app

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/cluster/join"
	"github.com/moatsh/moat/internal/egress/tlsca"
	"github.com/moatsh/moat/internal/store"
)

// renewEnv is an API server's join and renew endpoints on a CA of its
// own, and a node's data dir.
type renewEnv struct {
	is   *join.Issuer
	db   *store.DB
	srv  *httptest.Server
	node Config
}

func newRenewEnv(t *testing.T) *renewEnv {
	t.Helper()
	db, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ca, err := tlsca.Open(filepath.Join(t.TempDir(), "cluster-ca"), "cluster")
	if err != nil {
		t.Fatal(err)
	}
	e := &renewEnv{is: &join.Issuer{CA: ca, Tokens: db}, db: db}
	e.srv = httptest.NewServer(withJoin(http.NotFoundHandler(), e.is))
	t.Cleanup(e.srv.Close)
	e.node = Config{DataDir: t.TempDir(), NodeID: "node-a", Logger: slog.New(slog.DiscardHandler)}
	return e
}

// join joins the node as `moat cluster join` does.
func (e *renewEnv) join(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	tok, err := join.NewToken(ctx, e.db, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, cert, ca, err := join.Ask(ctx, e.srv.Client(), e.srv.URL, tok, e.node.NodeID)
	if err != nil {
		t.Fatal(err)
	}
	if err := join.Save(NodeCertDir(e.node.DataDir), e.srv.URL, key, cert, ca); err != nil {
		t.Fatal(err)
	}
}

// TestNodeCertRenew: a joined node renews through the API server it joined
// through; the new certificate is current at once and on disk for the
// next start; an answer with another CA is refused and changes nothing.
func TestNodeCertRenew(t *testing.T) {
	e := newRenewEnv(t)
	e.join(t)
	ctx := context.Background()
	ownCA, err := tlsca.Open(filepath.Join(t.TempDir(), "own-ca"), "cluster") // the node's own, unused
	if err != nil {
		t.Fatal(err)
	}
	_, nc, err := clusterTLS(e.node, &join.Issuer{CA: ownCA})
	if err != nil {
		t.Fatal(err)
	}
	if nc.dir == "" {
		t.Fatal("a joined node's certificate was not taken from its directory")
	}
	before := nc.keeper.Leaf().SerialNumber
	if err := nc.renew(ctx); err != nil {
		t.Fatal(err)
	}
	after := nc.keeper.Leaf()
	if after.SerialNumber.Cmp(before) == 0 || after.Subject.CommonName != "node-a" {
		t.Fatalf("after renew: serial %s (was %s), %s", after.SerialNumber, before, after.Subject.CommonName)
	}
	key, cert, _, err := readNodeCert(nc.dir)
	if err != nil {
		t.Fatal(err)
	}
	var disk join.Keeper
	if err := disk.Set(cert, key); err != nil || disk.Leaf().SerialNumber.Cmp(after.SerialNumber) != 0 {
		t.Fatalf("on disk: %v, serial %v, want %s", err, disk.Leaf(), after.SerialNumber)
	}

	// An API server that answers with another CA's certificate.
	other, err := tlsca.Open(filepath.Join(t.TempDir(), "other-ca"), "cluster")
	if err != nil {
		t.Fatal(err)
	}
	rogue := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"certificate": string(other.CertPEM()), "ca": string(other.CertPEM())})
	}))
	defer rogue.Close()
	if err := os.WriteFile(filepath.Join(nc.dir, join.APIFile), []byte(rogue.URL+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := nc.renew(ctx); err == nil || !strings.Contains(err.Error(), "another cluster CA") {
		t.Fatalf("renew with a rogue server: %v", err)
	}
	if nc.keeper.Leaf().SerialNumber.Cmp(after.SerialNumber) != 0 {
		t.Error("a refused renewal changed the certificate")
	}
	os.Remove(filepath.Join(nc.dir, join.APIFile))
	if err := nc.renew(ctx); err == nil || !strings.Contains(err.Error(), "join again") {
		t.Fatalf("renew without %s: %v", join.APIFile, err)
	}
}

// TestNodeCertRenewSelf: a server holding the CA signs its own next
// certificate, and run renews when the certificate is due.
func TestNodeCertRenewSelf(t *testing.T) {
	e := newRenewEnv(t)
	e.is.Lifetime = time.Second // due at once: two thirds of (5 min back + 1 s) have passed
	_, nc, err := clusterTLS(e.node, e.is)
	if err != nil {
		t.Fatal(err)
	}
	if nc.dir != "" || nc.self == nil {
		t.Fatal("a server without a joined certificate did not sign its own")
	}
	before := nc.keeper.Leaf().SerialNumber
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); nc.run(ctx) }()
	waitFor(t, func() bool { return nc.keeper.Leaf().SerialNumber.Cmp(before) != 0 })
	cancel()
	<-done
}

// TestReadNodeCert: a join's files are all there or none is; a partial
// set is an error that says so, not a reason to sign a new certificate.
func TestReadNodeCert(t *testing.T) {
	dir := t.TempDir()
	if _, _, _, err := readNodeCert(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("empty dir: %v", err)
	}
	os.WriteFile(filepath.Join(dir, join.CertFile), []byte("x"), 0o644)
	if _, _, _, err := readNodeCert(dir); err == nil || errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "all of") {
		t.Fatalf("partial: %v", err)
	}
}
