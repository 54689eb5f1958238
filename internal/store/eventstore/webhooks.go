package eventstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/moatsh/moat/internal/store/sqlbase"
)

// Webhook is a team's webhook: where its events go and how they are signed.
type Webhook struct {
	ID        string
	Team      string
	Name      string
	URL       string
	Enabled   bool
	Events    []string // the event types it receives
	Secret    string   // the signature secret (never returned by the API)
	CreatedAt time.Time
}

const webhookCols = `id, team, name, url, enabled, events, secret, created_at`

// CreateWebhook stores w (errdefs.ErrInvalidArgument without a valid team).
func (d *Tables) CreateWebhook(ctx context.Context, w Webhook) error {
	if err := sqlbase.ValidateTeam(w.Team); err != nil {
		return fmt.Errorf("create webhook: %w", err)
	}
	types, err := encodeTypes(w.Events)
	if err != nil {
		return fmt.Errorf("create webhook: %w", err)
	}
	_, err = d.w.ExecContext(ctx, `INSERT INTO webhooks (`+webhookCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		w.ID, w.Team, w.Name, w.URL, boolInt(w.Enabled), types, w.Secret, sqlbase.ToUnix(w.CreatedAt))
	if err != nil {
		return fmt.Errorf("create webhook: %w", err)
	}
	return nil
}

// GetWebhook returns team's webhook id (errdefs.ErrNotFound, also for
// another team's).
func (d *Tables) GetWebhook(ctx context.Context, team, id string) (Webhook, error) {
	hooks, err := queryWebhooks(ctx, d.r, `team = ? AND id = ?`, team, id)
	if err != nil {
		return Webhook{}, fmt.Errorf("get webhook: %w", err)
	}
	if len(hooks) == 0 {
		return Webhook{}, sqlbase.NotFound("webhook", id)
	}
	return hooks[0], nil
}

// ListWebhooks returns team's webhooks, oldest first.
func (d *Tables) ListWebhooks(ctx context.Context, team string) ([]Webhook, error) {
	hooks, err := queryWebhooks(ctx, d.r, `team = ?`, team)
	if err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	return hooks, nil
}

// UpdateWebhook replaces the name, URL, enabled flag, events and secret of
// w.Team's webhook w.ID (errdefs.ErrNotFound). Deliveries already queued
// keep going to the webhook's new URL.
func (d *Tables) UpdateWebhook(ctx context.Context, w Webhook) error {
	types, err := encodeTypes(w.Events)
	if err != nil {
		return fmt.Errorf("update webhook: %w", err)
	}
	res, err := d.w.ExecContext(ctx, `UPDATE webhooks SET name = ?, url = ?, enabled = ?, events = ?, secret = ?
		WHERE team = ? AND id = ?`, w.Name, w.URL, boolInt(w.Enabled), types, w.Secret, w.Team, w.ID)
	if err != nil {
		return fmt.Errorf("update webhook: %w", err)
	}
	return oneRow(res, w.ID)
}

// DeleteWebhook removes team's webhook id and its queued deliveries
// (errdefs.ErrNotFound).
func (d *Tables) DeleteWebhook(ctx context.Context, team, id string) error {
	res, err := d.w.ExecContext(ctx, `DELETE FROM webhooks WHERE team = ? AND id = ?`, team, id)
	if err != nil {
		return fmt.Errorf("delete webhook: %w", err)
	}
	return oneRow(res, id)
}

func oneRow(res sql.Result, id string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return sqlbase.NotFound("webhook", id)
	}
	return nil
}

type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

func queryWebhooks(ctx context.Context, q querier, where string, args ...any) ([]Webhook, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+webhookCols+` FROM webhooks WHERE `+where+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Webhook{}
	for rows.Next() {
		var w Webhook
		var enabled int
		var types string
		var created int64
		if err := rows.Scan(&w.ID, &w.Team, &w.Name, &w.URL, &enabled, &types, &w.Secret, &created); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(types), &w.Events); err != nil {
			return nil, fmt.Errorf("webhook %s events: %w", w.ID, err)
		}
		w.Enabled, w.CreatedAt = enabled == 1, sqlbase.FromUnix(created)
		out = append(out, w)
	}
	return out, rows.Err()
}

// Delivery is a queued delivery of an event to a webhook, with what it
// takes to make it.
type Delivery struct {
	ID        int64
	WebhookID string
	URL       string
	Secret    string
	Body      []byte // the event's JSON
	EventAt   time.Time
	Attempts  int // failed attempts so far
}

// DueDeliveries returns up to limit deliveries due at now to enabled
// webhooks, oldest event first.
func (d *Tables) DueDeliveries(ctx context.Context, now time.Time, limit int) ([]Delivery, error) {
	rows, err := d.r.QueryContext(ctx, `SELECT q.id, w.id, w.url, w.secret, e.body, e.at, q.attempts
		FROM webhook_deliveries q JOIN webhooks w ON w.id = q.webhook_id JOIN sandbox_events e ON e.seq = q.event_seq
		WHERE q.next_at <= ? AND w.enabled = 1 ORDER BY q.event_seq, q.id LIMIT ?`, sqlbase.ToUnix(now), limit)
	if err != nil {
		return nil, fmt.Errorf("due deliveries: %w", err)
	}
	defer rows.Close()
	var out []Delivery
	for rows.Next() {
		var q Delivery
		var body string
		var at int64
		if err := rows.Scan(&q.ID, &q.WebhookID, &q.URL, &q.Secret, &body, &at, &q.Attempts); err != nil {
			return nil, fmt.Errorf("due deliveries: %w", err)
		}
		q.Body, q.EventAt = []byte(body), sqlbase.FromUnix(at)
		out = append(out, q)
	}
	return out, rows.Err()
}

// NextDelivery is when the earliest queued delivery to an enabled webhook
// is due; ok is false when none is queued.
func (d *Tables) NextDelivery(ctx context.Context) (at time.Time, ok bool, err error) {
	var n sql.NullInt64
	err = d.r.QueryRowContext(ctx, `SELECT MIN(q.next_at) FROM webhook_deliveries q JOIN webhooks w ON w.id = q.webhook_id
		WHERE w.enabled = 1`).Scan(&n)
	if err != nil || !n.Valid {
		return time.Time{}, false, err
	}
	return sqlbase.FromUnix(n.Int64), true, nil
}

// DeliveryDone removes a delivery that was made, or given up.
func (d *Tables) DeliveryDone(ctx context.Context, id int64) error {
	if _, err := d.w.ExecContext(ctx, `DELETE FROM webhook_deliveries WHERE id = ?`, id); err != nil {
		return fmt.Errorf("delivery done: %w", err)
	}
	return nil
}

// DeliveryFailed counts a failed attempt of a delivery and makes it due
// again at next.
func (d *Tables) DeliveryFailed(ctx context.Context, id int64, next time.Time, reason string) error {
	_, err := d.w.ExecContext(ctx, `UPDATE webhook_deliveries SET attempts = attempts + 1, next_at = ?, last_error = ?
		WHERE id = ?`, sqlbase.ToUnix(next), reason, id)
	if err != nil {
		return fmt.Errorf("delivery failed: %w", err)
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
