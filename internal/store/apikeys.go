package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
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
	_, key, err := d.CreateNamedAPIKey(ctx, team, "")
	return key, err
}

// APIKey is a team's API key as listed: never its value.
type APIKey struct {
	ID        string // the row's number, as a string
	Name      string
	Prefix    string // APIKeyPrefix and the value's first 6 characters after it
	Suffix    string // the value's last 4 characters ("" for keys older than the API keys API)
	CreatedAt time.Time
}

// MaxAPIKeyName bounds a key's name.
const MaxAPIKeyName = 128

// CreateNamedAPIKey is CreateAPIKey with a name; it returns the key as
// listed and its value. ErrInvalidArgument for a bad team or a name
// longer than MaxAPIKeyName.
func (d *DB) CreateNamedAPIKey(ctx context.Context, team, name string) (APIKey, string, error) {
	if err := ValidateTeam(team); err != nil {
		return APIKey{}, "", fmt.Errorf("create api key: %w", err)
	}
	if len(name) > MaxAPIKeyName {
		return APIKey{}, "", fmt.Errorf("create api key: name longer than %d bytes: %w", MaxAPIKeyName, errInvalid)
	}
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		return APIKey{}, "", fmt.Errorf("create api key: %w", err)
	}
	key := APIKeyPrefix + hex.EncodeToString(b)
	k := APIKey{Name: name, Prefix: key[:len(APIKeyPrefix)+6], Suffix: key[len(key)-4:], CreatedAt: time.Now()}
	var id int64
	err := d.w.QueryRowContext(ctx, `INSERT INTO api_keys (hash, prefix, created_at, team, name, suffix) VALUES (?, ?, ?, ?, ?, ?) RETURNING id`,
		hashKey(key), k.Prefix, toUnix(k.CreatedAt), team, name, k.Suffix).Scan(&id)
	if err != nil {
		return APIKey{}, "", fmt.Errorf("create api key: %w", err)
	}
	k.ID = strconv.FormatInt(id, 10)
	return k, key, nil
}

// ListAPIKeys returns team's keys, oldest first.
func (d *DB) ListAPIKeys(ctx context.Context, team string) ([]APIKey, error) {
	return queryAll(ctx, d.r, "list api keys", func(sc scanner) (APIKey, error) {
		var k APIKey
		var id, created int64
		err := sc.Scan(&id, &k.Name, &k.Prefix, &k.Suffix, &created)
		k.ID, k.CreatedAt = strconv.FormatInt(id, 10), fromUnix(created)
		return k, err
	}, `SELECT id, name, prefix, suffix, created_at FROM api_keys WHERE team = ? ORDER BY id`, team)
}

// RenameAPIKey sets the name of team's key id; ErrNotFound when team has
// no such key, ErrInvalidArgument for a name past MaxAPIKeyName.
func (d *DB) RenameAPIKey(ctx context.Context, team, id, name string) error {
	if len(name) > MaxAPIKeyName {
		return fmt.Errorf("rename api key: name longer than %d bytes: %w", MaxAPIKeyName, errInvalid)
	}
	return d.onAPIKey(ctx, "rename", team, id, `UPDATE api_keys SET name = ? WHERE id = ? AND team = ?`, name)
}

// DeleteAPIKey removes team's key id; ErrNotFound when team has no such
// key.
func (d *DB) DeleteAPIKey(ctx context.Context, team, id string) error {
	return d.onAPIKey(ctx, "delete", team, id, `DELETE FROM api_keys WHERE id = ? AND team = ?`)
}

// APIKeyID is the ID of the key whose value is key ("" for none).
func (d *DB) APIKeyID(ctx context.Context, key string) (string, error) {
	var id int64
	err := d.r.QueryRowContext(ctx, `SELECT id FROM api_keys WHERE hash = ?`, hashKey(key)).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("api key id: %w", err)
	}
	return strconv.FormatInt(id, 10), nil
}

// onAPIKey runs q with args then id and team, and says ErrNotFound when it
// touched no row (an ID that is not a number never names a key).
func (d *DB) onAPIKey(ctx context.Context, what, team, id, q string, args ...any) error {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		return notFound("api key", id)
	}
	res, err := d.w.ExecContext(ctx, q, append(args, n, team)...)
	if err != nil {
		return fmt.Errorf("%s api key %s: %w", what, id, err)
	}
	if c, _ := res.RowsAffected(); c == 0 {
		return notFound("api key", id)
	}
	return nil
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
