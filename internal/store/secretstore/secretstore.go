// Package secretstore is the store's table of team secrets: names,
// metadata and versions of values sealed by the caller (internal/secrets
// encrypts; this package never sees a value in the clear). It is its own
// package so the store stays small; *store.DB embeds a Table, so callers
// keep calling the store.
package secretstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store/sqlbase"
)

// Table reads and writes the secrets and secret_versions tables through
// the store's one writer connection (w) and its reader pool (r).
type Table struct {
	w, r *sql.DB
}

// New returns the table over the store's writer and readers.
func New(w, r *sql.DB) *Table { return &Table{w: w, r: r} }

var (
	toUnix   = sqlbase.ToUnix
	fromUnix = sqlbase.FromUnix
	nonNil   = sqlbase.NonNil
	notFound = sqlbase.NotFound
)

// IDPrefix starts every secret ID; names may not start with it.
const IDPrefix = "sec_"

// Secret is a team's named secret without its value: what every read
// returns. Values live in Cipher rows, encrypted.
type Secret struct {
	ID             string
	Team           string
	Name           string // canonical (lower-case), unique within the team
	CurrentVersion int64
	Metadata       map[string]string
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// Cipher is one encrypted version of a secret's value: the ID of the
// key that sealed it and the sealed bytes (nonce and ciphertext).
type Cipher struct {
	KeyID string
	Data  []byte
}

// SealFunc encrypts the value of version of secret id (the caller binds
// both into the ciphertext, so a row cannot be swapped for another's).
type SealFunc func(id string, version int64) (Cipher, error)

const secretCols = `id, team, name, current_version, metadata, created_at, updated_at`

// CreateSecret stores s (ID, Team, Name, Metadata, CreatedAt) with version
// 1 sealed by seal, in one transaction: errdefs.ErrAlreadyExists when the
// name is taken in the team, errdefs.ErrInvalidArgument without a valid
// team; nothing is written on error.
func (d *Table) CreateSecret(ctx context.Context, s Secret, seal SealFunc) (Secret, error) {
	if err := sqlbase.ValidateTeam(s.Team); err != nil {
		return Secret{}, fmt.Errorf("create secret: %w", err)
	}
	md, err := json.Marshal(nonNil(s.Metadata))
	if err != nil {
		return Secret{}, fmt.Errorf("create secret: %w", err)
	}
	c, err := seal(s.ID, 1)
	if err != nil {
		return Secret{}, fmt.Errorf("create secret: %w", err)
	}
	s.CurrentVersion, s.UpdatedAt, s.Metadata = 1, s.CreatedAt, nonNil(s.Metadata)
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return Secret{}, fmt.Errorf("create secret: %w", err)
	}
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx, `INSERT INTO secrets (`+secretCols+`) VALUES (?, ?, ?, 1, ?, ?, ?)`,
		s.ID, s.Team, s.Name, string(md), toUnix(s.CreatedAt), toUnix(s.CreatedAt))
	if err != nil {
		if sqlbase.IsUniqueViolation(err) {
			return Secret{}, fmt.Errorf("create secret: %w", secretExists(s.Name))
		}
		return Secret{}, fmt.Errorf("create secret: %w", err)
	}
	if err := insertVersion(ctx, tx, s.ID, 1, c, s.CreatedAt); err != nil {
		return Secret{}, err
	}
	if err := tx.Commit(); err != nil {
		return Secret{}, fmt.Errorf("create secret: %w", err)
	}
	return s, nil
}

func secretExists(name string) error {
	return errdefs.Publicf(errdefs.ErrAlreadyExists, "secret %q already exists", name)
}

func insertVersion(ctx context.Context, tx *sql.Tx, id string, version int64, c Cipher, now time.Time) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO secret_versions (secret_id, version, key_id, ciphertext, created_at)
		VALUES (?, ?, ?, ?, ?)`, id, version, c.KeyID, c.Data, toUnix(now))
	if err != nil {
		return fmt.Errorf("store secret version: %w", err)
	}
	return nil
}

// secretWhere selects a secret of team by ID (sec_...) or canonical name.
func secretWhere(idOrName string) (string, string) {
	if strings.HasPrefix(idOrName, IDPrefix) {
		return `team = ? AND id = ?`, idOrName
	}
	return `team = ? AND name = ?`, strings.ToLower(idOrName)
}

func scanSecret(row interface{ Scan(...any) error }) (Secret, error) {
	var s Secret
	var md string
	var created, updated int64
	if err := row.Scan(&s.ID, &s.Team, &s.Name, &s.CurrentVersion, &md, &created, &updated); err != nil {
		return Secret{}, err
	}
	if err := json.Unmarshal([]byte(md), &s.Metadata); err != nil {
		return Secret{}, fmt.Errorf("secret %s metadata: %w", s.ID, err)
	}
	s.Metadata = nonNil(s.Metadata)
	s.CreatedAt, s.UpdatedAt = fromUnix(created), fromUnix(updated)
	return s, nil
}

func getSecret(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, team, idOrName string) (Secret, error) {
	where, arg := secretWhere(idOrName)
	s, err := scanSecret(q.QueryRowContext(ctx, `SELECT `+secretCols+` FROM secrets WHERE `+where, team, arg))
	if errors.Is(err, sql.ErrNoRows) {
		return Secret{}, notFound("secret", idOrName)
	}
	if err != nil {
		return Secret{}, fmt.Errorf("get secret %s: %w", idOrName, err)
	}
	return s, nil
}

// GetSecret returns team's secret by ID or name (errdefs.ErrNotFound, also
// for another team's).
func (d *Table) GetSecret(ctx context.Context, team, idOrName string) (Secret, error) {
	return getSecret(ctx, d.r, team, idOrName)
}

// UpdateSecret appends a version sealed by seal to team's secret and makes
// it current; metadata replaces the stored one unless nil
// (errdefs.ErrNotFound).
func (d *Table) UpdateSecret(ctx context.Context, team, idOrName string, metadata map[string]string, now time.Time,
	seal SealFunc) (Secret, error) {
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return Secret{}, fmt.Errorf("update secret: %w", err)
	}
	defer tx.Rollback()
	s, err := getSecret(ctx, tx, team, idOrName)
	if err != nil {
		return Secret{}, err
	}
	s.CurrentVersion++
	s.UpdatedAt = now.UTC()
	if metadata != nil {
		s.Metadata = metadata
	}
	c, err := seal(s.ID, s.CurrentVersion)
	if err != nil {
		return Secret{}, fmt.Errorf("update secret: %w", err)
	}
	md, err := json.Marshal(s.Metadata)
	if err != nil {
		return Secret{}, fmt.Errorf("update secret: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE secrets SET current_version = ?, metadata = ?, updated_at = ? WHERE id = ?`,
		s.CurrentVersion, string(md), toUnix(s.UpdatedAt), s.ID); err != nil {
		return Secret{}, fmt.Errorf("update secret: %w", err)
	}
	if err := insertVersion(ctx, tx, s.ID, s.CurrentVersion, c, now); err != nil {
		return Secret{}, err
	}
	if err := tx.Commit(); err != nil {
		return Secret{}, fmt.Errorf("update secret: %w", err)
	}
	return s, nil
}

// ListSecrets returns team's secrets by name, at most limit (> 0), after
// the name after ("" = from the start).
func (d *Table) ListSecrets(ctx context.Context, team, after string, limit int) ([]Secret, error) {
	rows, err := d.r.QueryContext(ctx, `SELECT `+secretCols+` FROM secrets WHERE team = ? AND name > ?
		ORDER BY name LIMIT ?`, team, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	defer rows.Close()
	out := []Secret{}
	for rows.Next() {
		s, err := scanSecret(rows)
		if err != nil {
			return nil, fmt.Errorf("list secrets: %w", err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	return out, nil
}

// DeleteSecret removes team's secret and every version of its value
// (errdefs.ErrNotFound).
func (d *Table) DeleteSecret(ctx context.Context, team, idOrName string) error {
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("delete secret: %w", err)
	}
	defer tx.Rollback()
	s, err := getSecret(ctx, tx, team, idOrName)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM secret_versions WHERE secret_id = ?`, s.ID); err != nil {
		return fmt.Errorf("delete secret: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM secrets WHERE id = ?`, s.ID); err != nil {
		return fmt.Errorf("delete secret: %w", err)
	}
	return tx.Commit()
}

// SecretValue returns the current version of team's secret and its sealed
// value (errdefs.ErrNotFound).
func (d *Table) SecretValue(ctx context.Context, team, idOrName string) (Secret, Cipher, error) {
	s, err := getSecret(ctx, d.r, team, idOrName)
	if err != nil {
		return Secret{}, Cipher{}, err
	}
	var c Cipher
	err = d.r.QueryRowContext(ctx, `SELECT key_id, ciphertext FROM secret_versions WHERE secret_id = ? AND version = ?`,
		s.ID, s.CurrentVersion).Scan(&c.KeyID, &c.Data)
	if errors.Is(err, sql.ErrNoRows) {
		return Secret{}, Cipher{}, notFound("secret", idOrName)
	}
	if err != nil {
		return Secret{}, Cipher{}, fmt.Errorf("secret %s value: %w", idOrName, err)
	}
	return s, c, nil
}

// ResealFunc re-encrypts one version's value; it returns the cipher
// unchanged when it is already under the current key.
type ResealFunc func(id string, version int64, c Cipher) (Cipher, error)

// ResealSecrets passes every stored version of every team's secret through
// reseal and stores what it returns, in one transaction (key rotation);
// it returns how many versions changed.
func (d *Table) ResealSecrets(ctx context.Context, reseal ResealFunc) (int, error) {
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("reseal secrets: %w", err)
	}
	defer tx.Rollback()
	type row struct {
		id      string
		version int64
		c       Cipher
	}
	rows, err := tx.QueryContext(ctx, `SELECT secret_id, version, key_id, ciphertext FROM secret_versions`)
	if err != nil {
		return 0, fmt.Errorf("reseal secrets: %w", err)
	}
	var all []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.version, &r.c.KeyID, &r.c.Data); err != nil {
			rows.Close()
			return 0, fmt.Errorf("reseal secrets: %w", err)
		}
		all = append(all, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("reseal secrets: %w", err)
	}
	n := 0
	for _, r := range all {
		c, err := reseal(r.id, r.version, r.c)
		if err != nil {
			return 0, fmt.Errorf("reseal secret %s version %d: %w", r.id, r.version, err)
		}
		if c.KeyID == r.c.KeyID {
			continue
		}
		if _, err := tx.ExecContext(ctx, `UPDATE secret_versions SET key_id = ?, ciphertext = ? WHERE secret_id = ? AND version = ?`,
			c.KeyID, c.Data, r.id, r.version); err != nil {
			return 0, fmt.Errorf("reseal secrets: %w", err)
		}
		n++
	}
	return n, tx.Commit()
}
