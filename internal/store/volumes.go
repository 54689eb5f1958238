package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Volume is a team's persistent filesystem (E2B's Volume): an ext4 image
// of SizeMB under the data dir that sandboxes mount and the volume content
// API reads and writes.
type Volume struct {
	ID     string
	Team   string
	Name   string // unique within its team
	SizeMB int
	// Token authorizes the volume content API for this volume.
	Token     string
	CreatedAt time.Time
	// Node holds the volume's image ("" = a server alone on its host).
	Node string
}

const volumeCols = `id, team, name, size_mb, token, created_at, node_id`

// InsertVolume stores v; errdefs.ErrAlreadyExists when its ID, or its name
// within its team, is taken; errdefs.ErrInvalidArgument without a valid
// team, ID, name or size.
func (d *DB) InsertVolume(ctx context.Context, v Volume) error {
	if err := ValidateTeam(v.Team); err != nil {
		return fmt.Errorf("insert volume %s: %w", v.ID, err)
	}
	if v.ID == "" || v.Name == "" || v.SizeMB <= 0 || v.Token == "" {
		return fmt.Errorf("insert volume %q (name %q, %d MB): %w", v.ID, v.Name, v.SizeMB, errInvalid)
	}
	_, err := d.w.ExecContext(ctx, `INSERT INTO volumes (`+volumeCols+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		v.ID, v.Team, v.Name, v.SizeMB, v.Token, toUnix(v.CreatedAt), v.Node)
	if err != nil {
		if isUniqueViolation(err) {
			return fmt.Errorf("volume %s (name %q): %w", v.ID, v.Name, errAlreadyExists)
		}
		return fmt.Errorf("insert volume %s: %w", v.ID, err)
	}
	return nil
}

// GetVolume returns team's volume whose ID or name is ref; ErrNotFound if
// none, or if it belongs to another team. Team "" looks in every team
// (server-internal callers only, by ID).
func (d *DB) GetVolume(ctx context.Context, team, ref string) (Volume, error) {
	row := d.r.QueryRowContext(ctx, `SELECT `+volumeCols+` FROM volumes
		WHERE (id = ? OR (? != '' AND name = ?)) AND (? = '' OR team = ?)
		ORDER BY id = ? DESC LIMIT 1`, ref, team, ref, team, team, ref)
	v, err := scanVolume(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Volume{}, notFound("volume", ref)
	}
	if err != nil {
		return Volume{}, fmt.Errorf("get volume %s: %w", ref, err)
	}
	return v, nil
}

// ListVolumes returns team's volumes by name.
func (d *DB) ListVolumes(ctx context.Context, team string) ([]Volume, error) {
	return queryAll(ctx, d.r, "list volumes", scanVolume,
		`SELECT `+volumeCols+` FROM volumes WHERE team = ? ORDER BY name`, team)
}

// DeleteVolume removes team's volume record; ErrNotFound when there is
// none (or it is another team's).
func (d *DB) DeleteVolume(ctx context.Context, team, id string) error {
	res, err := d.w.ExecContext(ctx, `DELETE FROM volumes WHERE id = ? AND team = ?`, id, team)
	if err != nil {
		return fmt.Errorf("delete volume %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return notFound("volume", id)
	}
	return nil
}

func scanVolume(sc scanner) (Volume, error) {
	var v Volume
	var created int64
	if err := sc.Scan(&v.ID, &v.Team, &v.Name, &v.SizeMB, &v.Token, &created, &v.Node); err != nil {
		return v, err
	}
	v.CreatedAt = fromUnix(created)
	return v, nil
}
