package join

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
)

// joined joins id with a fresh token and returns its key and certificate.
func (e *env) joined(t *testing.T, id string) (key, cert []byte) {
	t.Helper()
	tok, err := NewToken(context.Background(), e.db, time.Hour, e.now)
	if err != nil {
		t.Fatal(err)
	}
	key, csr, err := Request(id)
	if err != nil {
		t.Fatal(err)
	}
	if cert, _, err = e.is.Join(context.Background(), tok, csr); err != nil {
		t.Fatal(err)
	}
	return key, cert
}

// signedRenewal is what AskRenew sends, signed by signer at at.
func signedRenewal(t *testing.T, keyPEM []byte, node string, at time.Time) (csr []byte, atS string, sig []byte) {
	t.Helper()
	_, csr, err := Request(node)
	if err != nil {
		t.Fatal(err)
	}
	k, err := parseKey(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	atS = at.UTC().Format(time.RFC3339)
	if sig, err = ecdsa.SignASN1(rand.Reader, k, renewDigest(csr, atS)); err != nil {
		t.Fatal(err)
	}
	return csr, atS, sig
}

// TestRenew: a joined node renews over HTTP without a token; the new
// certificate is for the same node and a new key, and works in mutual
// TLS with the cluster's other peers.
func TestRenew(t *testing.T) {
	e := newEnv(t)
	srv := httptest.NewServer(e.is)
	defer srv.Close()
	key, cert := e.joined(t, "node-a")
	key2, cert2, ca, err := AskRenew(context.Background(), srv.Client(), srv.URL, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := parseCert(cert)
	next, err := parseCert(cert2)
	if err != nil {
		t.Fatal(err)
	}
	if next.Subject.CommonName != "node-a" || next.SerialNumber.Cmp(old.SerialNumber) == 0 || string(key2) == string(key) {
		t.Fatalf("renewed: %s serial %s (was %s), new key %v", next.Subject.CommonName, next.SerialNumber, old.SerialNumber, string(key2) != string(key))
	}
	node, err := TLSConfig(cert2, key2, ca)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := handshake(t, node, e.peer(t, "api-1"), "node-a"); err != nil || got != "api-1" {
		t.Fatalf("handshake with the renewed node: %q, %v", got, err)
	}
	// The renewed certificate renews in turn.
	if _, _, _, err := AskRenew(context.Background(), srv.Client(), srv.URL, cert2, key2); err != nil {
		t.Fatalf("renewing the renewed: %v", err)
	}
}

func TestRenewRefusals(t *testing.T) {
	e := newEnv(t)
	key, cert := e.joined(t, "node-a")
	otherKey, _ := e.joined(t, "node-b")
	foreignKey, foreignCert := newEnv(t).joined(t, "node-a") // the same name from another CA
	leaf, _ := parseCert(cert)
	tests := []struct {
		name  string
		cert  []byte
		sign  []byte // the key that signs
		node  string // the new request's node
		at    time.Time
		now   time.Time // the issuer's clock
		want  error
		cause string
	}{
		{"another CA's certificate", foreignCert, foreignKey, "node-a", e.now, e.now, errdefs.ErrPermissionDenied, "not a valid one"},
		{"expired certificate", cert, key, "node-a", leaf.NotAfter.Add(time.Minute), leaf.NotAfter.Add(time.Minute), errdefs.ErrPermissionDenied, "not a valid one"},
		{"another node's key", cert, otherKey, "node-a", e.now, e.now, errdefs.ErrPermissionDenied, "signature"},
		{"signed long ago", cert, key, "node-a", e.now.Add(-10 * time.Minute), e.now, errdefs.ErrPermissionDenied, "clock"},
		{"for another node", cert, key, "node-b", e.now, e.now, errdefs.ErrPermissionDenied, "cannot renew"},
		{"not a certificate", []byte("x"), key, "node-a", e.now, e.now, errdefs.ErrInvalidArgument, "PEM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := *e.is
			is.Now = func() time.Time { return tt.now }
			csr, at, sig := signedRenewal(t, tt.sign, tt.node, tt.at)
			_, _, err := is.Renew(tt.cert, csr, at, sig)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.cause) {
				t.Fatalf("renew: %v, want %v naming %q", err, tt.want, tt.cause)
			}
		})
	}
	// A signature is for one request: with another request it proves nothing.
	csr, at, sig := signedRenewal(t, key, "node-a", e.now)
	_, csr2, _ := Request("node-a")
	if _, _, err := e.is.Renew(cert, csr2, at, sig); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("a signature moved to another request: %v", err)
	}
	if _, _, err := e.is.Renew(cert, csr, "yesterday", sig); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a time that is not RFC 3339: %v", err)
	}
}

// TestRenewHTTP: the endpoint's negative answers.
func TestRenewHTTP(t *testing.T) {
	e := newEnv(t)
	srv := httptest.NewServer(e.is)
	defer srv.Close()
	_, cert := e.joined(t, "node-a")
	pemJSON := strings.ReplaceAll(string(cert), "\n", `\n`)
	for _, tt := range []struct {
		name, body string
		want       int
	}{
		{"not JSON", "x", http.StatusBadRequest},
		{"signature not base64", `{"certificate":"` + pemJSON + `","signature":"%%%"}`, http.StatusBadRequest},
		{"forged", `{"certificate":"` + pemJSON + `","csr":"","time":"` + time.Now().UTC().Format(time.RFC3339) + `","signature":"AAAA"}`, http.StatusForbidden},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := srv.Client().Post(srv.URL+RenewPath, "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("status %d (%s), want %d JSON", resp.StatusCode, resp.Header.Get("Content-Type"), tt.want)
			}
		})
	}
}

// TestKeeperRotates: a TLS configuration made once presents whatever
// certificate its Keeper holds at each new handshake.
func TestKeeperRotates(t *testing.T) {
	e := newEnv(t)
	var k Keeper
	key, cert := e.joined(t, "node-a")
	if err := k.Set(cert, key); err != nil {
		t.Fatal(err)
	}
	cli, err := k.Config(e.ca.CertPEM())
	if err != nil {
		t.Fatal(err)
	}
	srv := e.peer(t, "api-1")
	if got, err := handshake(t, srv, cli, "api-1"); err != nil || got != "node-a" {
		t.Fatalf("first: %q, %v", got, err)
	}
	key, cert = e.joined(t, "node-b")
	if err := k.Set(cert, key); err != nil {
		t.Fatal(err)
	}
	if got, err := handshake(t, srv, cli, "api-1"); err != nil || got != "node-b" {
		t.Fatalf("after Set: %q, %v", got, err)
	}
	if k.Leaf().Subject.CommonName != "node-b" {
		t.Errorf("Leaf: %s", k.Leaf().Subject.CommonName)
	}
	if err := k.Set(cert, []byte("x")); err == nil {
		t.Error("Set with a bad key")
	}
}
