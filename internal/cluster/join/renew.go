package join

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
)

// RenewPath is where API servers answer renewals: a node whose
// certificate still holds asks for its next one before it ends, proving
// that it holds the current one's key. No token is needed, so a node
// stays in the cluster as long as it renews in time; one that lets its
// certificate end must join again.
const RenewPath = "/cluster/renew"

// APIFile, beside KeyFile, holds the URL of the API server the node
// joined through; it renews there.
const APIFile = "api.url"

// renewSkew bounds how far a renewal's signing time may be from the
// issuer's clock.
const renewSkew = 5 * time.Minute

// renewRequest is the body of POST RenewPath; the answer is a joinAnswer.
type renewRequest struct {
	Certificate string `json:"certificate"` // PEM: the node's current certificate
	CSR         string `json:"csr"`         // PEM: the request for the new key
	Time        string `json:"time"`        // RFC 3339: when the node signed
	Signature   string `json:"signature"`   // base64 ASN.1 ECDSA of renewDigest by the current key
}

// renewDigest is what the current key signs: the request and the time, so
// that a signature cannot be reused for another key or, after renewSkew,
// at all.
func renewDigest(csrPEM []byte, at string) []byte {
	h := sha256.Sum256([]byte("moat-cluster-renew\n" + at + "\n" + string(csrPEM)))
	return h[:]
}

// Renew signs the next certificate of the node holding certPEM: the
// certificate must be the cluster CA's and still valid, sig the current
// key's signature of the new request csrPEM and the time at (RFC 3339,
// within five minutes of now), and the request for the same node ID.
// Errors: ErrInvalidArgument for malformed input, ErrPermissionDenied for
// a certificate or signature that does not prove the node.
func (is *Issuer) Renew(certPEM, csrPEM []byte, at string, sig []byte) (cert, ca []byte, err error) {
	now := is.now()
	leaf, err := parseCert(certPEM)
	if err != nil {
		return nil, nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(is.CA.CertPEM())
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, nil, errdefs.Publicf(errdefs.ErrPermissionDenied, "the certificate to renew is not a valid one of this cluster: %v", err)
	}
	t, err := time.Parse(time.RFC3339, at)
	if err != nil {
		return nil, nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "time %q: want RFC 3339", at)
	}
	if d := now.Sub(t); d > renewSkew || d < -renewSkew {
		return nil, nil, errdefs.Publicf(errdefs.ErrPermissionDenied, "the renewal was signed at %s, more than %s from this server's clock", at, renewSkew)
	}
	pub, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	if !ok || !ecdsa.VerifyASN1(pub, renewDigest(csrPEM, at), sig) {
		return nil, nil, errdefs.Publicf(errdefs.ErrPermissionDenied, "the renewal's signature is not the certificate's key's")
	}
	csr, err := parseCSR(csrPEM)
	if err != nil {
		return nil, nil, err
	}
	if node := csr.Subject.CommonName; node != leaf.Subject.CommonName {
		return nil, nil, errdefs.Publicf(errdefs.ErrPermissionDenied, "a certificate of node %q cannot renew for %q", leaf.Subject.CommonName, node)
	}
	return is.sign(csr)
}

// AskRenew asks the API server at apiURL for the next certificate of the
// node whose current certificate and key are certPEM and keyPEM (PEM,
// PKCS #8): it returns a new key, its certificate and the CA's.
func AskRenew(ctx context.Context, hc *http.Client, apiURL string, certPEM, keyPEM []byte) (key, cert, ca []byte, err error) {
	leaf, err := parseCert(certPEM)
	if err != nil {
		return nil, nil, nil, err
	}
	cur, err := parseKey(keyPEM)
	if err != nil {
		return nil, nil, nil, err
	}
	key, csr, err := Request(leaf.Subject.CommonName)
	if err != nil {
		return nil, nil, nil, err
	}
	at := time.Now().UTC().Format(time.RFC3339)
	sig, err := ecdsa.SignASN1(rand.Reader, cur, renewDigest(csr, at))
	if err != nil {
		return nil, nil, nil, err
	}
	body, _ := json.Marshal(renewRequest{Certificate: string(certPEM), CSR: string(csr), Time: at,
		Signature: base64.StdEncoding.EncodeToString(sig)})
	cert, ca, err = post(ctx, hc, apiURL, RenewPath, body)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("renew: %w", err)
	}
	return key, cert, ca, nil
}

// serveRenew answers POST RenewPath.
func (is *Issuer) serveRenew(w http.ResponseWriter, b []byte) {
	var in renewRequest
	if err := json.Unmarshal(b, &in); err != nil {
		errhttp.Write(w, http.StatusBadRequest, `the body must be JSON {"certificate","csr","time","signature"}`)
		return
	}
	sig, err := base64.StdEncoding.DecodeString(in.Signature)
	if err != nil {
		errhttp.Write(w, http.StatusBadRequest, "signature: not base64")
		return
	}
	cert, ca, err := is.Renew([]byte(in.Certificate), []byte(in.CSR), in.Time, sig)
	if err != nil {
		errhttp.WriteError(w, err)
		return
	}
	errhttp.WriteJSON(w, http.StatusOK, joinAnswer{Certificate: string(cert), CA: string(ca)})
}

func parseCert(certPEM []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(certPEM)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "the certificate is not a PEM CERTIFICATE")
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "certificate: %v", err)
	}
	return c, nil
}

func parseKey(keyPEM []byte) (*ecdsa.PrivateKey, error) {
	blk, _ := pem.Decode(keyPEM)
	if blk == nil {
		return nil, errors.New("node key: not PEM")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("node key: %w", err)
	}
	ec, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("node key: %T, want ECDSA", k)
	}
	return ec, nil
}

// Keeper holds a server's current node certificate for every TLS
// configuration made from it (Config), so that a renewed certificate
// serves each new connection without a restart.
type Keeper struct {
	cur atomic.Pointer[tls.Certificate]
}

// Set makes certPEM and keyPEM the current certificate.
func (k *Keeper) Set(certPEM, keyPEM []byte) error {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("cluster TLS: %w", err)
	}
	k.cur.Store(&pair)
	return nil
}

// Leaf is the current certificate (nil before Set).
func (k *Keeper) Leaf() *x509.Certificate {
	if c := k.cur.Load(); c != nil {
		return c.Leaf
	}
	return nil
}

// Config is one end of the node API's mutual TLS: it presents the
// current certificate and trusts only the cluster CA (caPEM), as a server
// (a client certificate from the CA is required) and as a client (the
// server's certificate must name the peer it dials,
// tls.Config.ServerName).
func (k *Keeper) Config(caPEM []byte) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("cluster TLS: no certificate in the CA file")
	}
	get := func() (*tls.Certificate, error) {
		if c := k.cur.Load(); c != nil {
			return c, nil
		}
		return nil, errors.New("cluster TLS: no node certificate")
	}
	return &tls.Config{RootCAs: pool, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13,
		GetCertificate:       func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return get() },
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return get() },
	}, nil
}

// RenewAt is when a certificate should be renewed: two thirds into its
// life, as ACME clients do, which leaves ten days of retries for a 30-day
// certificate.
func RenewAt(c *x509.Certificate) time.Time {
	return c.NotBefore.Add(c.NotAfter.Sub(c.NotBefore) * 2 / 3)
}
