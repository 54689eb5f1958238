package truststore

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/moatsh/moat/internal/egress/tlsca"
)

func TestInstall(t *testing.T) {
	ca, err := tlsca.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	bundle := filepath.Join(root, Bundle)
	os.MkdirAll(filepath.Dir(bundle), 0o755)
	const existing = "-----BEGIN CERTIFICATE-----\nexisting\n-----END CERTIFICATE-----" // no final newline
	os.WriteFile(bundle, []byte(existing), 0o644)
	for i := 0; i < 2; i++ { // idempotent
		env, err := Install(root, ca.CertPEM())
		if err != nil {
			t.Fatal(err)
		}
		if env["SSL_CERT_FILE"] != bundle || env["REQUESTS_CA_BUNDLE"] != bundle || env["NODE_EXTRA_CA_CERTS"] != filepath.Join(root, CAFile) {
			t.Fatalf("env = %v", env)
		}
	}
	b, _ := os.ReadFile(bundle)
	if !bytes.HasPrefix(b, []byte(existing+"\n")) || bytes.Count(b, ca.CertPEM()) != 1 {
		t.Fatalf("bundle:\n%s", b)
	}
	alone, _ := os.ReadFile(filepath.Join(root, CAFile))
	if !bytes.Equal(alone, ca.CertPEM()) {
		t.Fatalf("CA file: %q", alone)
	}
	// The installed CA verifies the proxy's leaves.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(alone)
	leaf, _ := ca.Leaf("api.example.com")
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "api.example.com", Roots: pool}); err != nil {
		t.Fatal(err)
	}
	// A bundle that does not exist yet holds the CA alone.
	root2 := t.TempDir()
	if _, err := Install(root2, ca.CertPEM()); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root2, Bundle)); !bytes.Equal(b, ca.CertPEM()) {
		t.Fatalf("new bundle: %q", b)
	}
}

func TestInstallRefusesNonCA(t *testing.T) {
	ca, _ := tlsca.LoadOrCreate(t.TempDir())
	leaf, _ := ca.Leaf("api.example.com")
	leafPEM := pemOf(leaf)
	for name, in := range map[string][]byte{"garbage": []byte("nope"), "leaf": leafPEM,
		"two": append(append([]byte{}, ca.CertPEM()...), ca.CertPEM()...)} {
		if _, err := Install(t.TempDir(), in); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func pemOf(c *tls.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]})
}
