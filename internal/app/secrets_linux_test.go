package app

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/secrets"
)

// TestRotateSecretsKey: the rotation re-encrypts every version under a new
// key (the values still open), keeps the old key line, and refuses while
// the data dir is locked by a server.
func TestRotateSecretsKey(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := openStore(ctx, StoreLocation(dir, ""))
	if err != nil {
		t.Fatal(err)
	}
	svc := secrets.NewService(db, secretsKeyring(dir))
	if _, err := svc.Create(ctx, "a", "k", "v1", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Update(ctx, "a", "k", "v2", nil); err != nil {
		t.Fatal(err)
	}
	db.Close()
	old, _ := secretsKeyring(dir).Current()

	id, n, err := RotateSecretsKey(ctx, dir)
	if err != nil || n != 2 || id == old {
		t.Fatalf("rotate = %s, %d, %v (old key %s)", id, n, err, old)
	}
	data, err := os.ReadFile(filepath.Join(dir, secrets.KeyFile))
	if err != nil || strings.Count(string(data), "\n") != 2 || !strings.HasPrefix(string(data), old+" ") {
		t.Fatalf("key file after rotation: %v", err)
	}
	db, err = openStore(ctx, StoreLocation(dir, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, c, err := db.SecretValue(ctx, "a", "k"); err != nil || c.KeyID != id {
		t.Fatalf("current version under key %s, %v; want %s", c.KeyID, err, id)
	}
	if v, err := secrets.NewService(db, secretsKeyring(dir)).Value(ctx, "a", "k"); err != nil || string(v) != "v2" {
		t.Fatalf("value after rotation = %q, %v", v, err)
	}
	unlock, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if _, _, err := RotateSecretsKey(ctx, dir); err == nil || !strings.Contains(err.Error(), "another moat serve") {
		t.Fatalf("rotate while a server holds the data dir: %v", err)
	}
}
