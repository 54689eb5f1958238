package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/moatsh/moat/internal/randid"
)

// Template is a built root filesystem sandboxes start from.
type Template struct {
	ID            string
	Name          string // alias, unique
	BuildID       string
	RootfsDir     string
	CPUCount      int
	MemoryMB      int
	DiskSizeMB    int
	EnvdVersion   string
	Runtime       string // optional per-template runtime ("" = server default)
	CreatedAt     time.Time
	UpdatedAt     time.Time
	SpawnCount    int
	LastSpawnedAt *time.Time
	// NodeID is the node that built the template and holds RootfsDir
	// ("" = every node has it there, as the built-in templates); Digest is
	// the tree's digest (package cluster/artefact), with which another
	// node checks its copy.
	NodeID string
	Digest string
}

const templateCols = `id, name, build_id, rootfs_dir, cpu_count, memory_mb, disk_size_mb,
	envd_version, runtime, created_at, updated_at, spawn_count, last_spawned_at, node_id, digest`

// UpsertTemplate inserts t or, when a template with t.Name exists, updates
// it in place (keeping its ID, CreatedAt and spawn statistics). An empty
// t.ID gets a random one.
func (d *DB) UpsertTemplate(ctx context.Context, t Template) error {
	if t.Name == "" {
		return fmt.Errorf("upsert template: empty name: %w", errInvalid)
	}
	if t.ID == "" {
		t.ID = randid.New(20)
	}
	now := time.Now()
	_, err := d.w.ExecContext(ctx, `INSERT INTO templates (`+templateCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, NULL, ?, ?)
		ON CONFLICT(name) DO UPDATE SET build_id=excluded.build_id, rootfs_dir=excluded.rootfs_dir,
			cpu_count=excluded.cpu_count, memory_mb=excluded.memory_mb, disk_size_mb=excluded.disk_size_mb,
			envd_version=excluded.envd_version, runtime=excluded.runtime, updated_at=excluded.updated_at,
			node_id=excluded.node_id, digest=excluded.digest`,
		t.ID, t.Name, t.BuildID, t.RootfsDir, t.CPUCount, t.MemoryMB, t.DiskSizeMB,
		t.EnvdVersion, t.Runtime, toUnix(now), toUnix(now), t.NodeID, t.Digest)
	if err != nil {
		return fmt.Errorf("upsert template %s: %w", t.Name, err)
	}
	return nil
}

// GetTemplate finds a template by ID or name; errdefs.ErrNotFound if none.
func (d *DB) GetTemplate(ctx context.Context, idOrName string) (Template, error) {
	row := d.r.QueryRowContext(ctx, `SELECT `+templateCols+` FROM templates
		WHERE id = ? OR name = ? ORDER BY id = ? DESC LIMIT 1`, idOrName, idOrName, idOrName)
	t, err := scanTemplate(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Template{}, notFound("template", idOrName)
	}
	if err != nil {
		return Template{}, fmt.Errorf("get template %s: %w", idOrName, err)
	}
	return t, nil
}

// ListTemplates returns every template, by name.
func (d *DB) ListTemplates(ctx context.Context) ([]Template, error) {
	return queryAll(ctx, d.r, "list templates", scanTemplate, `SELECT `+templateCols+` FROM templates ORDER BY name`)
}

// DeleteTemplate removes the template with exactly this ID, whoever owns
// it (its builds stay); errdefs.ErrNotFound when there is none. For tools
// that register a template for one run (moat bench --density).
func (d *DB) DeleteTemplate(ctx context.Context, id string) error {
	res, err := d.w.ExecContext(ctx, `DELETE FROM templates WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("delete template %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return notFound("template", id)
	}
	return nil
}

// MarkTemplateSpawned counts one more sandbox started from template id.
func (d *DB) MarkTemplateSpawned(ctx context.Context, id string, at time.Time) error {
	return markSpawned(ctx, d.w, id, at)
}

func markSpawned(ctx context.Context, db execer, id string, at time.Time) error {
	_, err := db.ExecContext(ctx, `UPDATE templates SET spawn_count = spawn_count + 1,
		last_spawned_at = ? WHERE id = ?`, toUnix(at), id)
	if err != nil {
		return fmt.Errorf("mark template %s spawned: %w", id, err)
	}
	return nil
}

type scanner interface{ Scan(dest ...any) error }

// queryAll runs a read query and scans every row with scan; what names
// the operation in errors.
func queryAll[T any](ctx context.Context, db *sql.DB, what string, scan func(scanner) (T, error), q string, args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func scanTemplate(s scanner) (Template, error) {
	var t Template
	var created, updated int64
	var last sql.NullInt64
	err := s.Scan(&t.ID, &t.Name, &t.BuildID, &t.RootfsDir, &t.CPUCount, &t.MemoryMB, &t.DiskSizeMB,
		&t.EnvdVersion, &t.Runtime, &created, &updated, &t.SpawnCount, &last, &t.NodeID, &t.Digest)
	if err != nil {
		return t, err
	}
	t.CreatedAt, t.UpdatedAt = fromUnix(created), fromUnix(updated)
	if last.Valid {
		lt := fromUnix(last.Int64)
		t.LastSpawnedAt = &lt
	}
	return t, nil
}
