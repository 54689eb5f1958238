// Package truststore adds the egress proxy's CA certificate to a
// sandbox's system trust store, for envd's /init (field moatEgressCA):
// it appends the certificate to Debian's bundle once, writes it alone
// where update-ca-certificates finds it again (so a later run of that tool
// keeps it in the bundle), and names the environment variables that point
// TLS libraries at the two files. The same code runs in containers, gVisor
// and microVMs: it only writes files inside the sandbox.
package truststore

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Paths inside the sandbox.
const (
	Bundle = "/etc/ssl/certs/ca-certificates.crt"                  // Debian's system bundle
	CAFile = "/usr/local/share/ca-certificates/moat-egress-ca.crt" // the CA alone
)

// ErrInvalid is a certificate that is not one PEM-encoded CA certificate.
var ErrInvalid = errors.New("not a PEM CA certificate")

// Install installs the CA certificate pemCert in the tree at root ("/" in
// a sandbox; another directory in tests and envd's host mode) and returns
// the variables processes started afterwards should see: SSL_CERT_FILE
// and REQUESTS_CA_BUNDLE name the bundle (OpenSSL, Go, Python's requests),
// NODE_EXTRA_CA_CERTS the CA alone (Node.js). Installing the same
// certificate again changes nothing.
func Install(root string, pemCert []byte) (map[string]string, error) {
	blk, rest := pem.Decode(pemCert)
	if blk == nil || blk.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		return nil, ErrInvalid
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil || !cert.IsCA {
		return nil, ErrInvalid
	}
	canon := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: blk.Bytes})
	bundle, caFile := filepath.Join(root, Bundle), filepath.Join(root, CAFile)
	if err := writeAtomic(caFile, canon); err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	if err := appendOnce(bundle, canon); err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	return map[string]string{"SSL_CERT_FILE": bundle, "REQUESTS_CA_BUNDLE": bundle, "NODE_EXTRA_CA_CERTS": caFile}, nil
}

// appendOnce appends cert to the bundle at path unless it holds it
// already; a missing bundle is created holding cert alone.
func appendOnce(path string, cert []byte) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if bytes.Contains(old, cert) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	add := cert
	if len(old) > 0 && old[len(old)-1] != '\n' {
		add = append([]byte("\n"), cert...)
	}
	if _, err := f.Write(add); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func writeAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
