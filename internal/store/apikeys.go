package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"
)

// APIKeyPrefix starts every key, as in E2B ("e2b_" + 40 hex).
const APIKeyPrefix = "e2b_"

// CreateAPIKey makes a new key and returns its plaintext, which is never
// stored (only its SHA-256 and a short display prefix are).
func (d *DB) CreateAPIKey(ctx context.Context) (string, error) {
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("create api key: %w", err)
	}
	key := APIKeyPrefix + hex.EncodeToString(b)
	_, err := d.w.ExecContext(ctx, `INSERT INTO api_keys (hash, prefix, created_at) VALUES (?, ?, ?)`,
		hashKey(key), key[:len(APIKeyPrefix)+6], toUnix(time.Now()))
	if err != nil {
		return "", fmt.Errorf("create api key: %w", err)
	}
	return key, nil
}

// CheckAPIKey reports whether key is a known API key.
func (d *DB) CheckAPIKey(ctx context.Context, key string) (bool, error) {
	if key == "" {
		return false, nil
	}
	var n int
	err := d.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM api_keys WHERE hash = ?`, hashKey(key)).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("check api key: %w", err)
	}
	return n > 0, nil
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
