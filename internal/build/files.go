package build

import (
	"crypto/sha256"
	"encoding/hex"
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
