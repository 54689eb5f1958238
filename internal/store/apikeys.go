package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/moatsh/moat/internal/store/sqlbase"
)

// APIKeyPrefix starts every key, as in E2B ("e2b_" + 40 hex).
const APIKeyPrefix = "e2b_"

// DefaultTeam owns the keys created without a team (and every key, sandbox
// and snapshot from before teams existed).
const DefaultTeam = "default"

// ValidateTeam checks a team name: 1..63 characters of a-z, 0-9, '_' and
// '-', starting with a letter or digit. ErrInvalidArgument otherwise.
func ValidateTeam(team string) error { return sqlbase.ValidateTeam(team) }

// CreateAPIKey makes a new key for team and returns its plaintext, which is
// never stored (only its SHA-256 and a short display prefix are).
// ErrInvalidArgument when the team name is not valid (see ValidateTeam).
func (d *DB) CreateAPIKey(ctx context.Context, team string) (string, error) {
	if err := ValidateTeam(team); err != nil {
		return "", fmt.Errorf("create api key: %w", err)
	}
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("create api key: %w", err)
	}
	key := APIKeyPrefix + hex.EncodeToString(b)
	_, err := d.w.ExecContext(ctx, `INSERT INTO api_keys (hash, prefix, created_at, team) VALUES (?, ?, ?, ?)`,
		hashKey(key), key[:len(APIKeyPrefix)+6], toUnix(time.Now()), team)
	if err != nil {
		return "", fmt.Errorf("create api key: %w", err)
	}
	return key, nil
}

// CheckAPIKey reports whether key is a known API key and, if so, the team
// it belongs to.
func (d *DB) CheckAPIKey(ctx context.Context, key string) (team string, ok bool, err error) {
	if key == "" {
		return "", false, nil
	}
	err = d.r.QueryRowContext(ctx, `SELECT team FROM api_keys WHERE hash = ?`, hashKey(key)).Scan(&team)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("check api key: %w", err)
	}
	return team, true, nil
}

// CountAPIKeys returns how many keys exist.
func (d *DB) CountAPIKeys(ctx context.Context) (int, error) {
	var n int
	if err := d.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM api_keys`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count api keys: %w", err)
	}
	return n, nil
}

func hashKey(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}
