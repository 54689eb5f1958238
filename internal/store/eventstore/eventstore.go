// Package eventstore is the store's tables of sandbox lifecycle events,
// teams' webhooks and the outbox of webhook deliveries (package events
// makes the events, package webhook delivers them). An event and the
// deliveries it owes are written in one transaction, so that nothing is
// lost between them when the server stops. It is its own package so the
// store stays small; *store.DB embeds Tables.
package eventstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/moatsh/moat/internal/store/sqlbase"
)

// Tables reads and writes the tables through the store's one writer
// connection (w) and its reader pool (r).
type Tables struct {
	w, r *sql.DB
}

// New returns the table over the store's writer and readers.
func New(w, r *sql.DB) *Tables { return &Tables{w: w, r: r} }

// Event is one stored lifecycle event: what the queries need of it, and
// Body, its JSON as listed and delivered.
type Event struct {
	ID        string
	Team      string
	SandboxID string
	Type      string
	At        time.Time
	Body      []byte
}

// EventFilter selects a team's events.
type EventFilter struct {
	SandboxID string   // "" for every sandbox
	Types     []string // any of them; none for every type
	Offset    int
	Limit     int  // at most this many (0: no limit)
	Asc       bool // oldest first (default newest first)
}

// AppendEvent stores ev and queues a delivery of it, due at once, to each
// enabled webhook of its team that subscribes to its type; it returns how
// many it queued.
func (d *Tables) AppendEvent(ctx context.Context, ev Event) (int, error) {
	if err := sqlbase.ValidateTeam(ev.Team); err != nil {
		return 0, fmt.Errorf("append event: %w", err)
	}
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("append event: %w", err)
	}
	defer tx.Rollback()
	var seq int64
	err = tx.QueryRowContext(ctx, `INSERT INTO sandbox_events (id, team, sandbox_id, type, at, body) VALUES (?, ?, ?, ?, ?, ?) RETURNING seq`,
		ev.ID, ev.Team, ev.SandboxID, ev.Type, sqlbase.ToUnix(ev.At), string(ev.Body)).Scan(&seq)
	if err != nil {
		return 0, fmt.Errorf("append event: %w", err)
	}
	hooks, err := queryWebhooks(ctx, tx, `team = ? AND enabled = 1`, ev.Team)
	if err != nil {
		return 0, fmt.Errorf("append event: %w", err)
	}
	n := 0
	for _, h := range hooks {
		if !slices.Contains(h.Events, ev.Type) {
			continue
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO webhook_deliveries (webhook_id, event_seq, next_at) VALUES (?, ?, ?)`,
			h.ID, seq, sqlbase.ToUnix(ev.At)); err != nil {
			return 0, fmt.Errorf("append event: queue delivery: %w", err)
		}
		n++
	}
	return n, tx.Commit()
}

// ListEvents returns team's events that f selects, in order of recording.
func (d *Tables) ListEvents(ctx context.Context, team string, f EventFilter) ([]Event, error) {
	where, args := []string{"team = ?"}, []any{team}
	if f.SandboxID != "" {
		where, args = append(where, "sandbox_id = ?"), append(args, f.SandboxID)
	}
	if len(f.Types) > 0 {
		where = append(where, "type IN (?"+strings.Repeat(", ?", len(f.Types)-1)+")")
		for _, t := range f.Types {
			args = append(args, t)
		}
	}
	order := "DESC"
	if f.Asc {
		order = "ASC"
	}
	limit := int64(f.Limit)
	if limit <= 0 {
		limit = math.MaxInt64 // no limit (SQLite's -1 is an error on PostgreSQL)
	}
	args = append(args, limit, max(f.Offset, 0))
	rows, err := d.r.QueryContext(ctx, `SELECT id, team, sandbox_id, type, at, body FROM sandbox_events WHERE `+
		strings.Join(where, " AND ")+` ORDER BY seq `+order+` LIMIT ? OFFSET ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	defer rows.Close()
	out := []Event{}
	for rows.Next() {
		var ev Event
		var at int64
		var body string
		if err := rows.Scan(&ev.ID, &ev.Team, &ev.SandboxID, &ev.Type, &at, &body); err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		ev.At, ev.Body = sqlbase.FromUnix(at), []byte(body)
		out = append(out, ev)
	}
	return out, rows.Err()
}

// PruneEvents deletes the events recorded before t, and any deliveries of
// them still queued; it returns how many events it deleted.
func (d *Tables) PruneEvents(ctx context.Context, before time.Time) (int64, error) {
	res, err := d.w.ExecContext(ctx, `DELETE FROM sandbox_events WHERE at < ?`, sqlbase.ToUnix(before))
	if err != nil {
		return 0, fmt.Errorf("prune events: %w", err)
	}
	return res.RowsAffected()
}

// encodeTypes is a webhook's events column.
func encodeTypes(types []string) (string, error) {
	b, err := json.Marshal(types)
	return string(b), err
}
