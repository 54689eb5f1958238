package app

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/moatsh/moat/internal/secrets"
)

// secretsKeyring is the keyring of the secrets key file in dataDir.
func secretsKeyring(dataDir string) *secrets.Keyring {
	return secrets.NewKeyring(filepath.Join(dataDir, secrets.KeyFile))
}

// RotateSecretsKey adds a key to dataDir's secrets key file, makes it the
// one new writes use and re-encrypts every stored secret version with it.
// It takes the data dir's lock, so it refuses while a server uses dataDir
// (a running server keeps the keys it loaded). It returns the new key's ID
// and how many versions it re-encrypted; the older key lines are then
// unused and may be deleted from the file.
func RotateSecretsKey(ctx context.Context, dataDir string) (string, int, error) {
	unlock, err := lockDataDir(dataDir)
	if err != nil {
		return "", 0, err
	}
	defer unlock()
	db, err := openStore(ctx, StoreLocation(dataDir, ""))
	if err != nil {
		return "", 0, err
	}
	defer db.Close()
	id, n, err := secrets.Rotate(ctx, db, secretsKeyring(dataDir))
	if err != nil {
		return "", 0, fmt.Errorf("rotate secrets key in %s: %w", dataDir, err)
	}
	return id, n, nil
}
