package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Snapshot is a saved sandbox (memory and disk) from which new sandboxes
// can be created; it outlives the sandbox it was taken from.
type Snapshot struct {
	ID         string
	Team       string // the team of the sandbox it was taken from
	Name       string // optional, unique within its team when set
	SandboxID  string // the sandbox it was taken from
	TemplateID string
	Alias      string // the template's name
	Runtime    string
	CPUCount   int
	MemoryMB   int
	DiskSizeMB int
	EnvVars    map[string]string // the source's create-time env vars, inherited by its forks
	// EnvdAccessToken is the source's envd token when the snapshot was
	// taken: envd in a sandbox started from it needs it to accept /init.
	EnvdAccessToken string
	CreatedAt       time.Time
}

// SnapshotFilter selects snapshots; zero values mean "any".
type SnapshotFilter struct {
	Team      string // "" = every team (server-internal callers only)
	SandboxID string
	Name      string
	After     string // continue after this snapshot ID (newest first)
	Limit     int
}

const snapshotCols = `id, name, sandbox_id, template_id, alias, runtime, cpu_count, memory_mb, disk_size_mb, env_vars,
	envd_access_token, created_at, team`

// InsertSnapshot stores s; errdefs.ErrAlreadyExists when its ID, or its name
// within its team, is taken; errdefs.ErrInvalidArgument without a valid team.
func (d *DB) InsertSnapshot(ctx context.Context, s Snapshot) error {
	if err := ValidateTeam(s.Team); err != nil {
		return fmt.Errorf("insert snapshot %s: %w", s.ID, err)
	}
	env, err := json.Marshal(nonNil(s.EnvVars))
	if err != nil {
		return fmt.Errorf("insert snapshot %s: %w", s.ID, err)
	}
	_, err = d.w.ExecContext(ctx, `INSERT INTO snapshots (`+snapshotCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		s.ID, s.Name, s.SandboxID, s.TemplateID, s.Alias, s.Runtime, s.CPUCount, s.MemoryMB, s.DiskSizeMB,
		string(env), s.EnvdAccessToken, toUnix(s.CreatedAt), s.Team)
	if err != nil {
		if isUniqueViolation(err) {
			return fmt.Errorf("snapshot %s (name %q): %w", s.ID, s.Name, errAlreadyExists)
		}
		return fmt.Errorf("insert snapshot %s: %w", s.ID, err)
	}
	return nil
}

// GetSnapshot returns team's snapshot whose ID or name is ref; ErrNotFound
// if none, or if it belongs to another team. Team "" looks in every team
// (server-internal callers only; a name may then match several).
func (d *DB) GetSnapshot(ctx context.Context, team, ref string) (Snapshot, error) {
	row := d.r.QueryRowContext(ctx, `SELECT `+snapshotCols+` FROM snapshots
		WHERE (id = ? OR (name != '' AND name = ?)) AND (? = '' OR team = ?)
		ORDER BY id = ? DESC LIMIT 1`, ref, ref, team, team, ref)
	s, err := scanSnapshot(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Snapshot{}, notFound("snapshot", ref)
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("get snapshot %s: %w", ref, err)
	}
	return s, nil
}

// ListSnapshots returns snapshots newest first.
func (d *DB) ListSnapshots(ctx context.Context, f SnapshotFilter) ([]Snapshot, error) {
	var where []string
	var args []any
	if f.Team != "" {
		where = append(where, "team = ?")
		args = append(args, f.Team)
	}
	if f.SandboxID != "" {
		where = append(where, "sandbox_id = ?")
		args = append(args, f.SandboxID)
	}
	if f.Name != "" {
		where = append(where, "name = ?")
		args = append(args, f.Name)
	}
	if f.After != "" {
		where = append(where, "(created_at, id) < (SELECT created_at, id FROM snapshots WHERE id = ?)")
		args = append(args, f.After)
	}
	q := `SELECT ` + snapshotCols + ` FROM snapshots`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at DESC, id DESC"
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	return queryAll(ctx, d.r, "list snapshots", scanSnapshot, q, args...)
}

// DeleteSnapshot removes the record; ErrNotFound when there is none.
func (d *DB) DeleteSnapshot(ctx context.Context, id string) error {
	res, err := d.w.ExecContext(ctx, `DELETE FROM snapshots WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return notFound("snapshot", id)
	}
	return nil
}

func scanSnapshot(sc scanner) (Snapshot, error) {
	var s Snapshot
	var env string
	var created int64
	if err := sc.Scan(&s.ID, &s.Name, &s.SandboxID, &s.TemplateID, &s.Alias, &s.Runtime, &s.CPUCount,
		&s.MemoryMB, &s.DiskSizeMB, &env, &s.EnvdAccessToken, &created, &s.Team); err != nil {
		return s, err
	}
	s.CreatedAt = fromUnix(created)
	if err := json.Unmarshal([]byte(env), &s.EnvVars); err != nil {
		return s, fmt.Errorf("snapshot %s env: %w", s.ID, err)
	}
	return s, nil
}
