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

// Sandbox is one sandbox's persistent record.
type Sandbox struct {
	ID              string
	Team            string // the team of the API key that created it; fixed for its life
	TemplateID      string
	Alias           string
	State           State
	Runtime         string
	Addr            string
	StartedAt       time.Time
	EndAt           time.Time
	Metadata        map[string]string
	EnvVars         map[string]string
	EnvdAccessToken string
	Secure          bool
	AllowInternet   bool
	AutoPause       bool
	AutoResume      bool // traffic through the proxy resumes it when paused
	// AutoPauseFilesystem: the auto-pause keeps only the files (E2B's
	// autoPauseMemory: false); PausedFilesystem: the current pause dropped
	// the memory, so a resume boots from the files and traffic never
	// auto-resumes it.
	AutoPauseFilesystem bool
	PausedFilesystem    bool
	Timeout             time.Duration // lifetime asked for at create (whole seconds); an auto-resume grants it again
	CPUCount            int
	MemoryMB            int
	DiskSizeMB          int
	Network             Network // egress policy and proxy access, on top of AllowInternet
	VolumeMounts        []VolumeMount
	// NodeID is the node that holds the sandbox (see Node): the server's
	// own node ID; "" in rows written before the node registry.
	NodeID string
}

// VolumeMount is a volume a sandbox mounts, and where.
type VolumeMount struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
	Path     string `json:"path"`
}

// Network is a sandbox's network policy in E2B's terms. AllowOut and
// DenyOut hold canonical entries (netpolicy.ParseEgress); the zero value is
// no policy.
type Network struct {
	AllowOut []string `json:"allowOut,omitempty"`
	DenyOut  []string `json:"denyOut,omitempty"`
	// TrafficAccessToken, when set, is required (header
	// e2b-traffic-access-token) on proxied requests to the sandbox's ports
	// other than envd's: the create asked allowPublicTraffic: false.
	TrafficAccessToken string `json:"trafficAccessToken,omitempty"`
	// Rules are E2B's network.rules, validated (secrets.ParseRules): by
	// domain, each domain's rules in the order given. Header values keep
	// their ${e2b.secrets.NAME} placeholders; secret values are never
	// stored here.
	Rules []NetworkRule `json:"rules,omitempty"`
}

// NetworkRule is one network.rules entry: headers set on the sandbox's
// HTTPS requests to Domain (a host name, or "*." and a host name for its
// subdomains).
type NetworkRule struct {
	Domain  string            `json:"domain"`
	Headers map[string]string `json:"headers,omitempty"`
}

// IsZero reports whether n is no policy.
func (n Network) IsZero() bool {
	return len(n.AllowOut) == 0 && len(n.DenyOut) == 0 && n.TrafficAccessToken == "" && len(n.Rules) == 0
}

// Cursor is a position in a sandbox listing: the last item returned.
type Cursor struct {
	StartedAt time.Time
	ID        string
}

// SandboxFilter selects sandboxes for ListSandboxes. Zero values mean "any".
type SandboxFilter struct {
	Team         string // "" = every team (server-internal callers only)
	States       []State
	Metadata     map[string]string // every key must be present with this value
	Template     string            // template ID or alias
	Order        string            // "desc" (default: newest first) or "asc"
	StartedAfter time.Time         // inclusive
	Cursor       *Cursor           // continue after this item
	Limit        int               // 0 = no limit
	NodeID       string            // only the sandboxes this node holds ("" = any)
}

const sandboxCols = `id, template_id, alias, state, runtime, addr, started_at, end_at, metadata,
	env_vars, envd_access_token, secure, allow_internet, auto_pause, cpu_count, memory_mb, disk_size_mb,
	auto_resume, timeout_s, team, network, volume_mounts, auto_pause_fs, paused_fs, node_id`

// InsertSandbox stores a new sandbox; errdefs.ErrAlreadyExists if the ID is
// taken, errdefs.ErrInvalidArgument without a valid team.
func (d *DB) InsertSandbox(ctx context.Context, s Sandbox) error {
	return insertSandbox(ctx, d.w, s)
}

// InsertSpawnedSandbox is InsertSandbox and MarkTemplateSpawned(s.TemplateID,
// s.StartedAt) in one transaction: one commit on a create's path instead of
// two, and the spawn is counted exactly when the sandbox is recorded. A
// template deleted meanwhile is no error (nothing to count).
func (d *DB) InsertSpawnedSandbox(ctx context.Context, s Sandbox) error {
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("insert sandbox %s: %w", s.ID, err)
	}
	defer tx.Rollback()
	if err := insertSandbox(ctx, tx, s); err != nil {
		return err
	}
	if err := markSpawned(ctx, tx, s.TemplateID, s.StartedAt); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("insert sandbox %s: %w", s.ID, err)
	}
	return nil
}

// execer is a *sql.DB or a *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func insertSandbox(ctx context.Context, db execer, s Sandbox) error {
	if err := ValidateTeam(s.Team); err != nil {
		return fmt.Errorf("insert sandbox %s: %w", s.ID, err)
	}
	md, env, err := marshalMaps(s)
	if err != nil {
		return fmt.Errorf("insert sandbox %s: %w", s.ID, err)
	}
	nw, err := marshalNetwork(s.Network)
	if err != nil {
		return fmt.Errorf("insert sandbox %s: %w", s.ID, err)
	}
	vm := ""
	if len(s.VolumeMounts) > 0 {
		b, err := json.Marshal(s.VolumeMounts)
		if err != nil {
			return fmt.Errorf("insert sandbox %s: %w", s.ID, err)
		}
		vm = string(b)
	}
	_, err = db.ExecContext(ctx, `INSERT INTO sandboxes (`+sandboxCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		s.ID, s.TemplateID, s.Alias, s.State, s.Runtime, s.Addr, toUnix(s.StartedAt), toUnix(s.EndAt),
		md, env, s.EnvdAccessToken, boolInt(s.Secure), boolInt(s.AllowInternet), boolInt(s.AutoPause),
		s.CPUCount, s.MemoryMB, s.DiskSizeMB, boolInt(s.AutoResume), int64(s.Timeout/time.Second), s.Team, nw, vm,
		boolInt(s.AutoPauseFilesystem), boolInt(s.PausedFilesystem), s.NodeID)
	if err != nil {
		if isUniqueViolation(err) {
			return fmt.Errorf("insert sandbox %s: %w", s.ID, errAlreadyExists)
		}
		return fmt.Errorf("insert sandbox %s: %w", s.ID, err)
	}
	return nil
}

// UpdateSandbox overwrites the record with s.ID (all but its team, which
// never changes); errdefs.ErrNotFound if none.
func (d *DB) UpdateSandbox(ctx context.Context, s Sandbox) error {
	md, env, err := marshalMaps(s)
	if err != nil {
		return fmt.Errorf("update sandbox %s: %w", s.ID, err)
	}
	nw, err := marshalNetwork(s.Network)
	if err != nil {
		return fmt.Errorf("update sandbox %s: %w", s.ID, err)
	}
	res, err := d.w.ExecContext(ctx, `UPDATE sandboxes SET template_id=?, alias=?, state=?, runtime=?,
		addr=?, started_at=?, end_at=?, metadata=?, env_vars=?, envd_access_token=?, secure=?,
		allow_internet=?, auto_pause=?, cpu_count=?, memory_mb=?, disk_size_mb=?, auto_resume=?,
		timeout_s=?, network=?, auto_pause_fs=?, paused_fs=?, node_id=? WHERE id=?`,
		s.TemplateID, s.Alias, s.State, s.Runtime, s.Addr, toUnix(s.StartedAt), toUnix(s.EndAt),
		md, env, s.EnvdAccessToken, boolInt(s.Secure), boolInt(s.AllowInternet), boolInt(s.AutoPause),
		s.CPUCount, s.MemoryMB, s.DiskSizeMB, boolInt(s.AutoResume), int64(s.Timeout/time.Second), nw,
		boolInt(s.AutoPauseFilesystem), boolInt(s.PausedFilesystem), s.NodeID, s.ID)
	if err != nil {
		return fmt.Errorf("update sandbox %s: %w", s.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return notFound("sandbox", s.ID)
	}
	return nil
}

// GetSandbox returns the sandbox id; errdefs.ErrNotFound if none.
func (d *DB) GetSandbox(ctx context.Context, id string) (Sandbox, error) {
	row := d.r.QueryRowContext(ctx, `SELECT `+sandboxCols+` FROM sandboxes WHERE id = ?`, id)
	s, err := scanSandbox(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Sandbox{}, notFound("sandbox", id)
	}
	if err != nil {
		return Sandbox{}, fmt.Errorf("get sandbox %s: %w", id, err)
	}
	return s, nil
}

// DeleteSandbox removes the record; deleting an unknown ID succeeds.
func (d *DB) DeleteSandbox(ctx context.Context, id string) error {
	if _, err := d.w.ExecContext(ctx, `DELETE FROM sandboxes WHERE id = ?`, id); err != nil {
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	return nil
}

// ListSandboxes returns the sandboxes matching f, ordered by start time
// (desc: newest first, ties by ID ascending; asc: the exact reverse).
func (d *DB) ListSandboxes(ctx context.Context, f SandboxFilter) ([]Sandbox, error) {
	q, args := buildListQuery(f)
	rows, err := d.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	defer rows.Close()
	var out []Sandbox
	for rows.Next() {
		s, err := scanSandbox(rows)
		if err != nil {
			return nil, fmt.Errorf("list sandboxes: %w", err)
		}
		if !matchMetadata(s.Metadata, f.Metadata) {
			continue
		}
		out = append(out, s)
		if f.Limit > 0 && len(out) >= f.Limit {
			break
		}
	}
	return out, rows.Err()
}

func buildListQuery(f SandboxFilter) (string, []any) {
	var where []string
	var args []any
	if f.Team != "" {
		where = append(where, "team = ?")
		args = append(args, f.Team)
	}
	if len(f.States) > 0 {
		where = append(where, "state IN (?"+strings.Repeat(", ?", len(f.States)-1)+")")
		for _, s := range f.States {
			args = append(args, s)
		}
	}
	if f.Template != "" {
		where = append(where, "(template_id = ? OR alias = ?)")
		args = append(args, f.Template, f.Template)
	}
	if !f.StartedAfter.IsZero() {
		where = append(where, "started_at >= ?")
		args = append(args, toUnix(f.StartedAfter))
	}
	if f.NodeID != "" {
		where = append(where, "node_id = ?")
		args = append(args, f.NodeID)
	}
	asc := f.Order == "asc"
	if c := f.Cursor; c != nil {
		if asc {
			where = append(where, "(started_at > ? OR (started_at = ? AND id < ?))")
		} else {
			where = append(where, "(started_at < ? OR (started_at = ? AND id > ?))")
		}
		args = append(args, toUnix(c.StartedAt), toUnix(c.StartedAt), c.ID)
	}
	q := `SELECT ` + sandboxCols + ` FROM sandboxes`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	if asc {
		q += " ORDER BY started_at ASC, id DESC"
	} else {
		q += " ORDER BY started_at DESC, id ASC"
	}
	return q, args
}

func matchMetadata(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

func marshalMaps(s Sandbox) (md, env string, err error) {
	m, err := json.Marshal(nonNil(s.Metadata))
	if err != nil {
		return "", "", err
	}
	e, err := json.Marshal(nonNil(s.EnvVars))
	if err != nil {
		return "", "", err
	}
	return string(m), string(e), nil
}

// marshalNetwork stores no policy as "".
func marshalNetwork(n Network) (string, error) {
	if n.IsZero() {
		return "", nil
	}
	b, err := json.Marshal(n)
	return string(b), err
}

func scanSandbox(sc scanner) (Sandbox, error) {
	var s Sandbox
	var started, end int64
	var md, env, nw, vm string
	var secure, inet, autoPause, autoResume, autoPauseFS, pausedFS int
	var timeoutS int64
	err := sc.Scan(&s.ID, &s.TemplateID, &s.Alias, &s.State, &s.Runtime, &s.Addr, &started, &end, &md,
		&env, &s.EnvdAccessToken, &secure, &inet, &autoPause, &s.CPUCount, &s.MemoryMB, &s.DiskSizeMB,
		&autoResume, &timeoutS, &s.Team, &nw, &vm, &autoPauseFS, &pausedFS, &s.NodeID)
	if err != nil {
		return s, err
	}
	s.StartedAt, s.EndAt = fromUnix(started), fromUnix(end)
	s.Secure, s.AllowInternet, s.AutoPause, s.AutoResume = secure != 0, inet != 0, autoPause != 0, autoResume != 0
	s.AutoPauseFilesystem, s.PausedFilesystem = autoPauseFS != 0, pausedFS != 0
	s.Timeout = time.Duration(timeoutS) * time.Second
	if err := json.Unmarshal([]byte(md), &s.Metadata); err != nil {
		return s, fmt.Errorf("sandbox %s metadata: %w", s.ID, err)
	}
	if err := json.Unmarshal([]byte(env), &s.EnvVars); err != nil {
		return s, fmt.Errorf("sandbox %s env: %w", s.ID, err)
	}
	if nw != "" {
		if err := json.Unmarshal([]byte(nw), &s.Network); err != nil {
			return s, fmt.Errorf("sandbox %s network: %w", s.ID, err)
		}
	}
	if vm != "" {
		if err := json.Unmarshal([]byte(vm), &s.VolumeMounts); err != nil {
			return s, fmt.Errorf("sandbox %s volume mounts: %w", s.ID, err)
		}
	}
	return s, nil
}
