package build

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// FilesDir is team's store of uploaded COPY sources (tar archives, gzip
// or not, as the SDK made them, named by the SDK's files hash):
//
//	<DataDir>/build-files/<hex of sha256(team), 24 digits>/<hash>.tar
//
// Each team has its own, so a team can never supply another's files.
func FilesDir(dataDir, team string) string {
	sum := sha256.Sum256([]byte(team))
	return filepath.Join(dataDir, "build-files", hex.EncodeToString(sum[:12]))
}

// FilesPath is where team's upload of hash is kept.
func FilesPath(dataDir, team, hash string) string {
	return filepath.Join(FilesDir(dataDir, team), hash+".tar")
}

// fileSHA256 hashes the file at path.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", filepath.Base(path), err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
