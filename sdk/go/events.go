package moat

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/moatsh/moat/api/rest"
)

// Event is a sandbox lifecycle event (E2B's events API; docs/events.md).
type Event = rest.SandboxEvent

// Webhook is a team's webhook, without its signature secret.
type Webhook = rest.Webhook

// NewWebhook registers a webhook: URL, the event types it receives
// (rest.SandboxLifecycleCreated, ...), the secret every delivery is signed
// with, and an optional name and enabled flag.
type NewWebhook = rest.NewWebhook

// EventQuery selects events: at most Limit (1–100; 0 means the server's
// 10), skipping Offset, oldest first with Asc, of any of Types.
type EventQuery struct {
	Offset, Limit int
	Asc           bool
	Types         []string
}

// Events lists the team's events, or one sandbox's when sandboxID is set,
// newest first unless q.Asc.
func (c *Client) Events(ctx context.Context, sandboxID string, q EventQuery) ([]Event, error) {
	v := url.Values{}
	if q.Offset > 0 {
		v.Set("offset", strconv.Itoa(q.Offset))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Asc {
		v.Set("orderAsc", "true")
	}
	for _, t := range q.Types {
		v.Add("types", t)
	}
	path := "/events/sandboxes"
	if sandboxID != "" {
		path += "/" + url.PathEscape(sandboxID)
	}
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out []Event
	return out, c.do(ctx, http.MethodGet, path, nil, http.StatusOK, &out)
}

// CreateWebhook registers a webhook for the team.
func (c *Client) CreateWebhook(ctx context.Context, w NewWebhook) (Webhook, error) {
	var out Webhook
	return out, c.do(ctx, http.MethodPost, "/events/webhooks", w, http.StatusCreated, &out)
}

// Webhooks lists the team's webhooks.
func (c *Client) Webhooks(ctx context.Context) ([]Webhook, error) {
	var out []Webhook
	return out, c.do(ctx, http.MethodGet, "/events/webhooks", nil, http.StatusOK, &out)
}

// UpdateWebhook replaces the fields u sets of webhook id.
func (c *Client) UpdateWebhook(ctx context.Context, id string, u rest.WebhookUpdate) (Webhook, error) {
	var out Webhook
	return out, c.do(ctx, http.MethodPatch, "/events/webhooks/"+url.PathEscape(id), u, http.StatusOK, &out)
}

// DeleteWebhook removes webhook id and its pending deliveries.
func (c *Client) DeleteWebhook(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/events/webhooks/"+url.PathEscape(id), nil, http.StatusOK, nil)
}
