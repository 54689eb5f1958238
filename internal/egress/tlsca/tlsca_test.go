package tlsca

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestLoadOrCreate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "egress-ca")
	ca, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	for f, mode := range map[string]os.FileMode{dir: 0o700 | os.ModeDir, filepath.Join(dir, KeyFile): 0o600,
		filepath.Join(dir, CertFile): 0o644} {
		fi, err := os.Stat(f)
		if err != nil || fi.Mode() != mode {
			t.Fatalf("%s: mode %v, %v; want %v", f, fi.Mode(), err, mode)
		}
	}
	again, err := LoadOrCreate(dir)
	if err != nil || string(again.CertPEM()) != string(ca.CertPEM()) {
		t.Fatalf("reload: %v, same CA %v", err, err == nil && string(again.CertPEM()) == string(ca.CertPEM()))
	}
	if !ca.cert.IsCA || !ca.cert.MaxPathLenZero || ca.cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Fatalf("CA certificate: %+v", ca.cert)
	}

	// A key others may read is refused.
	if err := os.Chmod(filepath.Join(dir, KeyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreate(dir); err == nil {
		t.Fatal("world-readable key accepted")
	}
	// A creation that stopped half way (no certificate) starts afresh.
	os.Chmod(filepath.Join(dir, KeyFile), 0o600)
	os.Remove(filepath.Join(dir, CertFile))
	fresh, err := LoadOrCreate(dir)
	if err != nil || string(fresh.CertPEM()) == string(ca.CertPEM()) {
		t.Fatalf("half-created CA: %v", err)
	}
	// A directory others may enter is closed again.
	os.Chmod(dir, 0o755)
	if _, err := LoadOrCreate(dir); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v", fi.Mode().Perm())
	}
}

func TestLeaf(t *testing.T) {
	ca, err := LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca.now = func() time.Time { return now }
	l, err := ca.Leaf("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	if _, err := l.Leaf.Verify(x509.VerifyOptions{DNSName: "api.example.com", Roots: roots, CurrentTime: now}); err != nil {
		t.Fatalf("leaf does not verify: %v", err)
	}
	if _, err := l.Leaf.Verify(x509.VerifyOptions{DNSName: "other.example.com", Roots: roots, CurrentTime: now}); err == nil {
		t.Fatal("leaf verifies for another name")
	}
	if len(l.Leaf.DNSNames) != 1 || l.Leaf.IsCA || l.Leaf.NotAfter.Sub(now) > 25*time.Hour {
		t.Fatalf("leaf: names %v, CA %v, lifetime %v", l.Leaf.DNSNames, l.Leaf.IsCA, l.Leaf.NotAfter.Sub(now))
	}
	if again, _ := ca.Leaf("api.example.com"); again != l {
		t.Fatal("leaf not cached")
	}
	now = now.Add(leafLifetime - renewBefore + time.Minute)
	if renewed, _ := ca.Leaf("api.example.com"); renewed == l || !renewed.Leaf.NotAfter.After(l.Leaf.NotAfter) {
		t.Fatal("leaf near its expiry not renewed")
	}
	for i := 0; i < maxLeaves+10; i++ {
		ca.leaves[string(rune('a'+i%26))+time.Duration(i).String()] = l
	}
	if _, err := ca.Leaf("x.example.com"); err != nil || len(ca.leaves) > maxLeaves {
		t.Fatalf("cache bound: %d leaves, %v", len(ca.leaves), err)
	}
}
