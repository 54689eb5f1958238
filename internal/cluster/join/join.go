// Package join is how a node gets into the cluster: an operator prints a
// join token (`moat cluster token`), the node presents it once, with a
// certificate request, and gets a certificate from the cluster CA that
// both ends of the node API check (mutual TLS: API servers and nodes
// trust the cluster CA and nothing else). The token is single-use and
// expires; only its secret's SHA-256 is stored.
package join

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/moatsh/moat/internal/egress/tlsca"
	"github.com/moatsh/moat/internal/errdefs"
)

// Tokens is where join tokens are kept (package store).
type Tokens interface {
	CreateJoinToken(ctx context.Context, id, hash string, created, expires time.Time) error
	UseJoinToken(ctx context.Context, id, hash, node string, now time.Time) error
}

// Defaults: a token's life, and a node certificate's (a node asks for a
// new one, over mutual TLS with the old, before it ends).
const (
	DefaultTokenTTL = time.Hour
	CertLifetime    = 30 * 24 * time.Hour
	tokenPrefix     = "moatjoin_"
)

// NewToken stores and returns a join token valid for ttl:
// "moatjoin_<id>.<secret>", 8 and 32 bytes of hex.
func NewToken(ctx context.Context, st Tokens, ttl time.Duration, now time.Time) (string, error) {
	if ttl <= 0 || ttl > 7*24*time.Hour {
		return "", fmt.Errorf("join token lifetime %s: want more than 0 and at most 7 days: %w", ttl, errdefs.ErrInvalidArgument)
	}
	id, secret := make([]byte, 8), make([]byte, 32)
	if _, err := rand.Read(id); err != nil {
		return "", err
	}
	if _, err := rand.Read(secret); err != nil {
		return "", err
	}
	tok := tokenPrefix + hex.EncodeToString(id) + "." + hex.EncodeToString(secret)
	if err := st.CreateJoinToken(ctx, hex.EncodeToString(id), hash(hex.EncodeToString(secret)), now, now.Add(ttl)); err != nil {
		return "", err
	}
	return tok, nil
}

var tokenRE = regexp.MustCompile(`^` + tokenPrefix + `([0-9a-f]{16})\.([0-9a-f]{64})$`)

// parseToken splits a token into its ID and secret.
func parseToken(tok string) (id, secret string, err error) {
	m := tokenRE.FindStringSubmatch(strings.TrimSpace(tok))
	if m == nil {
		return "", "", errdefs.Publicf(errdefs.ErrInvalidArgument, "not a join token (want %s<16 hex>.<64 hex>)", tokenPrefix)
	}
	return m[1], m[2], nil
}

func hash(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// nodeIDRE is what a node's ID may be: it names the node in its
// certificate (a DNS name) and in the registry.
var nodeIDRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$`)

// Issuer signs node certificates for join tokens.
type Issuer struct {
	CA     *tlsca.CA
	Tokens Tokens
	Now    func() time.Time
	// Lifetime of the certificates it signs; 0 = CertLifetime.
	Lifetime time.Duration
}

func (is *Issuer) now() time.Time {
	if is.Now != nil {
		return is.Now()
	}
	return time.Now()
}

func (is *Issuer) lifetime() time.Duration {
	if is.Lifetime > 0 {
		return is.Lifetime
	}
	return CertLifetime
}

// Join checks token (and uses it up) and signs the certificate request
// csrPEM, whose CommonName is the node's ID, returning the certificate
// and the CA's, both PEM. Errors: ErrInvalidArgument (a malformed token,
// request or ID), ErrPermissionDenied (an unknown, expired or used token).
func (is *Issuer) Join(ctx context.Context, token string, csrPEM []byte) (cert, ca []byte, err error) {
	id, secret, err := parseToken(token)
	if err != nil {
		return nil, nil, err
	}
	csr, err := parseCSR(csrPEM)
	if err != nil {
		return nil, nil, err
	}
	if err := is.Tokens.UseJoinToken(ctx, id, hash(secret), csr.Subject.CommonName, is.now()); err != nil {
		return nil, nil, err
	}
	return is.sign(csr)
}

// parseCSR decodes and checks a certificate request for a node: PEM, its
// signature, and its CommonName a node ID.
func parseCSR(csrPEM []byte) (*x509.CertificateRequest, error) {
	blk, _ := pem.Decode(csrPEM)
	if blk == nil || blk.Type != "CERTIFICATE REQUEST" {
		return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "the certificate request is not a PEM CERTIFICATE REQUEST")
	}
	csr, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil {
		return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "certificate request: %v", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "certificate request signature: %v", err)
	}
	if node := csr.Subject.CommonName; !nodeIDRE.MatchString(node) {
		return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "node ID %q: want lower-case letters, digits, '.' and '-', at most 63", node)
	}
	return csr, nil
}

// sign makes the node certificate for csr; cert and ca are PEM.
func (is *Issuer) sign(csr *x509.CertificateRequest) (cert, ca []byte, err error) {
	der, err := is.CA.Peer(csr.PublicKey, csr.Subject.CommonName, is.lifetime())
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), is.CA.CertPEM(), nil
}

// Request makes a node's key and its certificate request for nodeID
// (both PEM).
func Request(nodeID string) (keyPEM, csrPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: nodeID}}, key)
	if err != nil {
		return nil, nil, err
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// TLSConfig is Config of a Keeper holding certPEM and keyPEM.
func TLSConfig(certPEM, keyPEM, caPEM []byte) (*tls.Config, error) {
	var k Keeper
	if err := k.Set(certPEM, keyPEM); err != nil {
		return nil, err
	}
	return k.Config(caPEM)
}

// Self is the certificate of a server that holds the CA itself (an API
// server): a new key and a certificate for nodeID signed by the CA, as a
// join would give it, and the CA's certificate; all PEM.
func (is *Issuer) Self(nodeID string) (keyPEM, certPEM, caPEM []byte, err error) {
	if !nodeIDRE.MatchString(nodeID) {
		return nil, nil, nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "node ID %q: want lower-case letters, digits, '.' and '-', at most 63", nodeID)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	der, err := is.CA.Peer(key.Public(), nodeID, is.lifetime())
	if err != nil {
		return nil, nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), is.CA.CertPEM(), nil
}
