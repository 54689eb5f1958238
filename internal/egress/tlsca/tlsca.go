// Package tlsca is the egress proxy's certificate authority: a CA whose
// private key is created once per data dir, is readable by root only and
// never leaves the host, and leaf certificates for intercepted server names
// minted on demand (short-lived, one name each) and cached until shortly
// before they expire. Sandboxes that have network.rules trust the CA's
// certificate (see internal/envd/truststore), which lets the proxy
// terminate their TLS to the rule domains. The cluster's CA is the same
// kind of CA in another directory (Open with its purpose), which signs the
// nodes' and API servers' certificates (Peer; package cluster/join).
package tlsca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Files in the CA's directory (<data dir>/egress-ca).
const (
	KeyFile  = "ca.key" // PKCS #8 private key, PEM, mode 0600
	CertFile = "ca.crt" // the CA certificate, PEM
)

// Lifetimes: the CA's, and its leaves' (a leaf is minted again when it
// has less than renewBefore left).
const (
	caLifetime   = 10 * 365 * 24 * time.Hour
	leafLifetime = 24 * time.Hour
	renewBefore  = time.Hour
	maxLeaves    = 4096
)

// CA signs leaf certificates. It is safe for concurrent use.
type CA struct {
	cert *x509.Certificate
	key  crypto.Signer
	pem  []byte
	now  func() time.Time

	mu     sync.Mutex
	leaves map[string]*tls.Certificate // by server name; guarded by mu
}

// LoadOrCreate returns the CA kept in dir, creating dir (mode 0700) and a
// new CA in it when it holds none. A key file that group or others may
// read is refused, as is a certificate that does not belong to the key or
// has expired.
func LoadOrCreate(dir string) (*CA, error) { return Open(dir, "egress") }

// Open is LoadOrCreate for a CA of another purpose ("cluster"), which
// names it in its certificate and in errors.
func Open(dir, purpose string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%s CA: %w", purpose, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%s CA: %w", purpose, err)
	}
	keyPath, certPath := filepath.Join(dir, KeyFile), filepath.Join(dir, CertFile)
	_, kerr := os.Stat(keyPath)
	_, cerr := os.Stat(certPath)
	if errors.Is(kerr, os.ErrNotExist) || errors.Is(cerr, os.ErrNotExist) {
		// Neither, or a creation that stopped half way: no sandbox can
		// trust a CA whose files were never both written.
		if err := create(keyPath, certPath, purpose); err != nil {
			return nil, fmt.Errorf("%s CA: create in %s: %w", purpose, dir, err)
		}
	}
	ca, err := load(keyPath, certPath)
	if err != nil {
		return nil, fmt.Errorf("%s CA: %w", purpose, err)
	}
	return ca, nil
}

// create writes a new CA key and certificate, each through a temporary
// file renamed into place, the key last.
func create(keyPath, certPath, purpose string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	now := time.Now()
	spki, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	ski := sha256.Sum256(spki)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"Moat"}, CommonName: "Moat " + purpose + " CA " + shortName(host)},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		SubjectKeyId:          ski[:20],
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return writeFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk}), 0o600)
}

// shortName bounds the host name in the CA's common name (64 bytes at most).
func shortName(h string) string {
	if len(h) > 40 {
		h = h[:40]
	}
	return h
}

func writeFile(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func load(keyPath, certPath string) (*CA, error) {
	fi, err := os.Stat(keyPath)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s is mode %v: group or others may read it (want 0600)", keyPath, fi.Mode().Perm())
	}
	kb, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	cb, err := os.ReadFile(certPath)
	if err != nil {
		return nil, err
	}
	kblk, _ := pem.Decode(kb)
	cblk, _ := pem.Decode(cb)
	if kblk == nil || cblk == nil {
		return nil, errors.New("key or certificate file is not PEM")
	}
	k, err := x509.ParsePKCS8PrivateKey(kblk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: not a signing key", keyPath)
	}
	cert, err := x509.ParseCertificate(cblk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certPath, err)
	}
	if pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("%s does not belong to %s", certPath, keyPath)
	}
	if !cert.IsCA || time.Now().After(cert.NotAfter) {
		return nil, fmt.Errorf("%s is not a valid CA certificate (expired %s?)", certPath, cert.NotAfter.Format(time.DateOnly))
	}
	return &CA{cert: cert, key: signer, pem: pem.EncodeToMemory(cblk), now: time.Now, leaves: map[string]*tls.Certificate{}}, nil
}

// CertPEM is the CA's certificate, PEM-encoded: what sandboxes trust.
func (c *CA) CertPEM() []byte { return c.pem }

// Leaf returns a certificate for name (a host name, lower case) signed by
// the CA: valid for a day, for server authentication, with name as its
// only subject alternative name. Leaves are cached by name.
func (c *CA) Leaf(name string) (*tls.Certificate, error) {
	now := c.now()
	c.mu.Lock()
	if l := c.leaves[name]; l != nil && now.Before(l.Leaf.NotAfter.Add(-renewBefore)) {
		c.mu.Unlock()
		return l, nil
	}
	c.mu.Unlock()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("leaf for %s: %w", name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     now.Add(leafLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{name},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("leaf for %s: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("leaf for %s: %w", name, err)
	}
	tc := &tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: key, Leaf: leaf}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.leaves) >= maxLeaves {
		for n, l := range c.leaves {
			if !now.Before(l.Leaf.NotAfter.Add(-renewBefore)) || len(c.leaves) >= maxLeaves {
				delete(c.leaves, n)
			}
		}
	}
	c.leaves[name] = tc
	return tc, nil
}

// Peer signs pub into a certificate for name (CommonName and only DNS
// name) that is valid for lifetime, for both ends of mutual TLS (server
// and client authentication), and returns it in DER.
func (c *CA) Peer(pub crypto.PublicKey, name string, lifetime time.Duration) ([]byte, error) {
	now := c.now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{Organization: []string{"Moat"}, CommonName: name},
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     now.Add(lifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{name},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, pub, c.key)
	if err != nil {
		return nil, fmt.Errorf("certificate for %s: %w", name, err)
	}
	return der, nil
}

// serial is a random 128-bit serial number.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return n.Add(n, big.NewInt(1))
}
