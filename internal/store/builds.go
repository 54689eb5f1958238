package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/randid"
)

// Build states, as E2B's TemplateBuildStatus names them.
const (
	BuildWaiting  = "waiting"  // requested; the steps have not been sent yet
	BuildBuilding = "building" // running
	BuildReady    = "ready"    // the template was registered
	BuildError    = "error"    // failed; nothing was registered
)

// ErrSharedTemplate is returned by DeleteTeamTemplate for a template
// built with the CLI, which belongs to no team.
var ErrSharedTemplate = errdefs.Publicf(errdefs.ErrFailedPrecondition, "template is shared (built with the CLI)")

// Build is one requested build of a team's template (E2B's template build
// API). Its template reaches the templates table only when it is ready.
type Build struct {
	ID         string
	TemplateID string
	Name       string // the template's alias
	Team       string
	Status     string
	Reason     string // why it failed (BuildError)
	ReasonStep string // the failing step's index, "" when none
	CPUCount   int
	MemoryMB   int
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// TemplateConfig is what a template's build set for its sandboxes'
// processes: E2B's ENV, WORKDIR and USER steps. Zero values mean envd's
// defaults (user "user", /home/user).
type TemplateConfig struct {
	Env     map[string]string `json:"env,omitempty"`
	Workdir string            `json:"workdir,omitempty"`
	User    string            `json:"user,omitempty"`
	// StartCmd runs in the background in every new sandbox of the
	// template; a create answers once ReadyCmd exits 0 (E2B's
	// setStartCmd / setReadyCmd).
	StartCmd string `json:"startCmd,omitempty"`
	ReadyCmd string `json:"readyCmd,omitempty"`
}

// IsZero reports whether c sets nothing.
func (c TemplateConfig) IsZero() bool {
	return len(c.Env) == 0 && c.Workdir == "" && c.User == "" && c.StartCmd == "" && c.ReadyCmd == ""
}

const buildCols = `id, template_id, name, team, status, reason, reason_step, cpu_count, memory_mb, created_at, updated_at`

// RequestBuild starts a build of team's template name (E2B's POST
// /v3/templates): a template of team with that name keeps its ID, a new
// name gets a new one. A name taken by a shared template or by another
// team's template (built or being built) is errdefs.ErrAlreadyExists.
func (d *DB) RequestBuild(ctx context.Context, team, name string, cpuCount, memoryMB int) (Build, error) {
	if team == "" || name == "" {
		return Build{}, fmt.Errorf("request build: empty team or name: %w", errInvalid)
	}
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return Build{}, fmt.Errorf("request build %s: %w", name, err)
	}
	defer tx.Rollback()
	var tplID, owner string
	err = tx.QueryRowContext(ctx, `SELECT id, team FROM templates WHERE name = ?`, name).Scan(&tplID, &owner)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		err = tx.QueryRowContext(ctx, `SELECT template_id, team FROM template_builds WHERE name = ?
			ORDER BY created_at DESC LIMIT 1`, name).Scan(&tplID, &owner)
		if errors.Is(err, sql.ErrNoRows) {
			tplID, owner, err = randid.New(20), team, nil
		}
	}
	if err != nil {
		return Build{}, fmt.Errorf("request build %s: %w", name, err)
	}
	if owner != team {
		return Build{}, errdefs.Publicf(errAlreadyExists, "template alias '%s' is already taken", name)
	}
	now := time.Now()
	b := Build{ID: newUUID(), TemplateID: tplID, Name: name, Team: team, Status: BuildWaiting,
		CPUCount: cpuCount, MemoryMB: memoryMB, CreatedAt: now.UTC(), UpdatedAt: now.UTC()}
	_, err = tx.ExecContext(ctx, `INSERT INTO template_builds (`+buildCols+`) VALUES (?, ?, ?, ?, ?, '', '', ?, ?, ?, ?)`,
		b.ID, b.TemplateID, b.Name, b.Team, b.Status, b.CPUCount, b.MemoryMB, toUnix(now), toUnix(now))
	if err != nil {
		return Build{}, fmt.Errorf("request build %s: %w", name, err)
	}
	return b, tx.Commit()
}

// GetBuild returns build buildID of team's template templateID;
// errdefs.ErrNotFound if there is none or it is another team's.
func (d *DB) GetBuild(ctx context.Context, team, templateID, buildID string) (Build, error) {
	row := d.r.QueryRowContext(ctx, `SELECT `+buildCols+` FROM template_builds
		WHERE id = ? AND template_id = ? AND team = ?`, buildID, templateID, team)
	b, err := scanBuild(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Build{}, errdefs.Publicf(errdefs.ErrNotFound, "build '%s' of template '%s' not found", buildID, templateID)
	}
	if err != nil {
		return Build{}, fmt.Errorf("get build %s: %w", buildID, err)
	}
	return b, nil
}

// ListBuilds returns the builds of a team's template, newest first.
func (d *DB) ListBuilds(ctx context.Context, team, templateID string) ([]Build, error) {
	return queryAll(ctx, d.r, "list builds", scanBuild, `SELECT `+buildCols+` FROM template_builds
		WHERE template_id = ? AND team = ? ORDER BY created_at DESC`, templateID, team)
}

// StartBuild moves a waiting build to building; a build that is not
// waiting (already started or finished) is errdefs.ErrFailedPrecondition.
func (d *DB) StartBuild(ctx context.Context, id string) error {
	res, err := d.w.ExecContext(ctx, `UPDATE template_builds SET status = ?, updated_at = ?
		WHERE id = ? AND status = ?`, BuildBuilding, toUnix(time.Now()), id, BuildWaiting)
	if err != nil {
		return fmt.Errorf("start build %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.Publicf(errdefs.ErrFailedPrecondition, "build %s was already started", id)
	}
	return nil
}

// FailBuild marks a build failed with reason (and the failing step's
// index, "" when no step failed).
func (d *DB) FailBuild(ctx context.Context, id, reason, step string) error {
	_, err := d.w.ExecContext(ctx, `UPDATE template_builds SET status = ?, reason = ?, reason_step = ?,
		updated_at = ? WHERE id = ?`, BuildError, reason, step, toUnix(time.Now()), id)
	if err != nil {
		return fmt.Errorf("fail build %s: %w", id, err)
	}
	return nil
}

// FailUnfinishedBuilds marks every waiting or building build failed: a
// server that starts again has no goroutine running them.
func (d *DB) FailUnfinishedBuilds(ctx context.Context, reason string) (int, error) {
	res, err := d.w.ExecContext(ctx, `UPDATE template_builds SET status = ?, reason = ?, updated_at = ?
		WHERE status IN (?, ?)`, BuildError, reason, toUnix(time.Now()), BuildWaiting, BuildBuilding)
	if err != nil {
		return 0, fmt.Errorf("fail unfinished builds: %w", err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// FinishBuild registers the template a build made (t.ID and t.Name are
// the build's; t.BuildID is set to b.ID), owned by the build's team, with
// cfg, and marks the build ready, in one transaction. A template of the
// same name that belongs to someone else (a shared one, or another team's
// that finished first) is errdefs.ErrAlreadyExists and the build fails.
func (d *DB) FinishBuild(ctx context.Context, b Build, t Template, cfg TemplateConfig) error {
	conf, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("finish build %s: %w", b.ID, err)
	}
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("finish build %s: %w", b.ID, err)
	}
	defer tx.Rollback()
	var id, owner string
	err = tx.QueryRowContext(ctx, `SELECT id, team FROM templates WHERE name = ?`, b.Name).Scan(&id, &owner)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return fmt.Errorf("finish build %s: %w", b.ID, err)
	case owner != b.Team || id != b.TemplateID:
		return errdefs.Publicf(errAlreadyExists, "template alias '%s' is already taken", b.Name)
	}
	now := toUnix(time.Now())
	_, err = tx.ExecContext(ctx, `INSERT INTO templates (`+templateCols+`, team, config)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, NULL, ?, ?, ?, ?)
		ON CONFLICT(id) DO UPDATE SET build_id=excluded.build_id, rootfs_dir=excluded.rootfs_dir,
			cpu_count=excluded.cpu_count, memory_mb=excluded.memory_mb, disk_size_mb=excluded.disk_size_mb,
			envd_version=excluded.envd_version, runtime=excluded.runtime, updated_at=excluded.updated_at,
			config=excluded.config, node_id=excluded.node_id, digest=excluded.digest`,
		b.TemplateID, b.Name, b.ID, t.RootfsDir, t.CPUCount, t.MemoryMB, t.DiskSizeMB,
		t.EnvdVersion, t.Runtime, now, now, t.NodeID, t.Digest, b.Team, string(conf))
	if err != nil {
		return fmt.Errorf("finish build %s: register template: %w", b.ID, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE template_builds SET status = ?, updated_at = ? WHERE id = ?`,
		BuildReady, now, b.ID); err != nil {
		return fmt.Errorf("finish build %s: %w", b.ID, err)
	}
	return tx.Commit()
}

// GetTeamTemplate finds a template by ID or name that team may use: a
// shared one or one of team's. Another team's template is
// errdefs.ErrNotFound, exactly like an unknown one.
func (d *DB) GetTeamTemplate(ctx context.Context, team, idOrName string) (Template, error) {
	var owner string
	row := d.r.QueryRowContext(ctx, `SELECT `+templateCols+`, team FROM templates
		WHERE (id = ? OR name = ?) AND (team = '' OR team = ?) ORDER BY id = ? DESC LIMIT 1`,
		idOrName, idOrName, team, idOrName)
	t, err := scanTemplate(extraScan{row, []any{&owner}})
	if errors.Is(err, sql.ErrNoRows) {
		return Template{}, notFound("template", idOrName)
	}
	if err != nil {
		return Template{}, fmt.Errorf("get template %s: %w", idOrName, err)
	}
	return t, nil
}

// TemplateOwner returns the team owning template id ("" for a shared one);
// errdefs.ErrNotFound when there is no such template.
func (d *DB) TemplateOwner(ctx context.Context, id string) (string, error) {
	var owner string
	err := d.r.QueryRowContext(ctx, `SELECT team FROM templates WHERE id = ?`, id).Scan(&owner)
	if errors.Is(err, sql.ErrNoRows) {
		return "", notFound("template", id)
	}
	if err != nil {
		return "", fmt.Errorf("template %s owner: %w", id, err)
	}
	return owner, nil
}

// TeamOwnsTemplateID reports whether templateID is team's: a registered
// template of team or one with a build of team.
func (d *DB) TeamOwnsTemplateID(ctx context.Context, team, templateID string) (bool, error) {
	var n int
	err := d.r.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM templates WHERE id = ? AND team = ?)
		+ (SELECT COUNT(*) FROM template_builds WHERE template_id = ? AND team = ?)`,
		templateID, team, templateID, team).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("template %s: %w", templateID, err)
	}
	return n > 0, nil
}

// ListTeamTemplates returns the templates team may use (shared ones and
// its own), by name.
func (d *DB) ListTeamTemplates(ctx context.Context, team string) ([]Template, error) {
	return queryAll(ctx, d.r, "list templates", scanTemplate, `SELECT `+templateCols+` FROM templates
		WHERE team = '' OR team = ? ORDER BY name`, team)
}

// TemplateConfigOf returns what template id's build set for its
// processes; the zero value for a template without one (or an unknown ID).
func (d *DB) TemplateConfigOf(ctx context.Context, id string) (TemplateConfig, error) {
	var raw string
	err := d.r.QueryRowContext(ctx, `SELECT config FROM templates WHERE id = ?`, id).Scan(&raw)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && raw == "") {
		return TemplateConfig{}, nil
	}
	if err != nil {
		return TemplateConfig{}, fmt.Errorf("template %s config: %w", id, err)
	}
	var c TemplateConfig
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		return TemplateConfig{}, fmt.Errorf("template %s config: %w", id, err)
	}
	return c, nil
}

// DeleteTeamTemplate removes team's template id (by ID or name) and its
// builds and returns it. A shared template is ErrSharedTemplate (the CLI
// deletes those); another team's, or none, is errdefs.ErrNotFound.
// Builds still running are errdefs.ErrFailedPrecondition.
func (d *DB) DeleteTeamTemplate(ctx context.Context, team, idOrName string) (Template, error) {
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return Template{}, fmt.Errorf("delete template %s: %w", idOrName, err)
	}
	defer tx.Rollback()
	var owner string
	row := tx.QueryRowContext(ctx, `SELECT `+templateCols+`, team FROM templates
		WHERE (id = ? OR name = ?) AND (team = '' OR team = ?) ORDER BY id = ? DESC LIMIT 1`,
		idOrName, idOrName, team, idOrName)
	t, err := scanTemplate(extraScan{row, []any{&owner}})
	switch {
	case errors.Is(err, sql.ErrNoRows):
		// A template that was requested but never built has only builds.
		var id string
		err = tx.QueryRowContext(ctx, `SELECT template_id FROM template_builds WHERE (template_id = ? OR name = ?)
			AND team = ? LIMIT 1`, idOrName, idOrName, team).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return Template{}, notFound("template", idOrName)
		}
		if err != nil {
			return Template{}, fmt.Errorf("delete template %s: %w", idOrName, err)
		}
		t = Template{ID: id}
		owner = team
	case err != nil:
		return Template{}, fmt.Errorf("delete template %s: %w", idOrName, err)
	}
	if owner == "" {
		return Template{}, fmt.Errorf("template '%s': %w", idOrName, ErrSharedTemplate)
	}
	var running int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM template_builds WHERE template_id = ? AND status = ?`,
		t.ID, BuildBuilding).Scan(&running); err != nil {
		return Template{}, fmt.Errorf("delete template %s: %w", idOrName, err)
	}
	if running > 0 {
		return Template{}, errdefs.Publicf(errdefs.ErrFailedPrecondition, "template '%s' has a build running", idOrName)
	}
	for _, q := range []string{`DELETE FROM templates WHERE id = ?`, `DELETE FROM template_builds WHERE template_id = ?`,
		`DELETE FROM template_copies WHERE template_id = ?`} {
		if _, err := tx.ExecContext(ctx, q, t.ID); err != nil {
			return Template{}, fmt.Errorf("delete template %s: %w", idOrName, err)
		}
	}
	return t, tx.Commit()
}

func scanBuild(s scanner) (Build, error) {
	var b Build
	var created, updated int64
	err := s.Scan(&b.ID, &b.TemplateID, &b.Name, &b.Team, &b.Status, &b.Reason, &b.ReasonStep,
		&b.CPUCount, &b.MemoryMB, &created, &updated)
	b.CreatedAt, b.UpdatedAt = fromUnix(created), fromUnix(updated)
	return b, err
}

// extraScan scans columns selected after templateCols into extra.
type extraScan struct {
	s     scanner
	extra []any
}

func (e extraScan) Scan(dest ...any) error { return e.s.Scan(append(dest, e.extra...)...) }

// newUUID returns a random version-4 UUID (E2B's build IDs are UUIDs).
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
