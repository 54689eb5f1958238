// Package eventapi serves E2B's lifecycle events API (GET /events/sandboxes
// and /events/sandboxes/{sandboxID}) and its webhook registry
// (/events/webhooks) for the server. Every route acts for the caller's
// team only: another team's events and webhooks do not exist for it.
package eventapi

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/moatsh/moat/api/rest"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errhttp"
	"github.com/moatsh/moat/internal/events"
	"github.com/moatsh/moat/internal/store"
)

// Store is what the API reads and writes.
type Store interface {
	ListEvents(ctx context.Context, team string, f store.EventFilter) ([]store.Event, error)
	CreateWebhook(ctx context.Context, w store.Webhook) error
	GetWebhook(ctx context.Context, team, id string) (store.Webhook, error)
	ListWebhooks(ctx context.Context, team string) ([]store.Webhook, error)
	UpdateWebhook(ctx context.Context, w store.Webhook) error
	DeleteWebhook(ctx context.Context, team, id string) error
}

// Deps is what the API uses of the server.
type Deps struct {
	Store Store
	// CheckURL refuses a webhook URL deliveries could never reach
	// (webhook.Service.CheckURL).
	CheckURL func(string) error
	// Team is the caller's team (the server's API-key check put it in the
	// request).
	Team func(*http.Request) string
	// Fail answers with err as E2B's JSON error and logs it once.
	Fail func(http.ResponseWriter, *http.Request, error)
	// Decode reads a required JSON body into v; when it fails it has
	// answered already.
	Decode func(w http.ResponseWriter, r *http.Request, v any) bool
}

// API holds the handlers; a nil *API is a server without events.
type API struct{ d Deps }

// New returns the API.
func New(d Deps) *API { return &API{d: d} }

// Register adds the routes to m behind auth; on a nil API they answer 501.
func (a *API) Register(m *http.ServeMux, auth func(http.HandlerFunc) http.HandlerFunc) {
	routes := []struct {
		pattern string
		h       func(*API, http.ResponseWriter, *http.Request)
	}{
		{"GET /events/sandboxes", (*API).listEvents},
		{"GET /events/sandboxes/{sandboxID}", (*API).listEvents},
		{"GET /events/webhooks", (*API).listWebhooks},
		{"POST /events/webhooks", (*API).createWebhook},
		{"GET /events/webhooks/{webhookID}", (*API).getWebhook},
		{"PATCH /events/webhooks/{webhookID}", (*API).updateWebhook},
		{"DELETE /events/webhooks/{webhookID}", (*API).deleteWebhook},
	}
	for _, rt := range routes {
		h := http.HandlerFunc(notImplemented)
		if a != nil {
			serve := rt.h
			h = func(w http.ResponseWriter, r *http.Request) { serve(a, w, r) }
		}
		m.HandleFunc(rt.pattern, auth(h))
	}
}

func notImplemented(w http.ResponseWriter, r *http.Request) {
	errhttp.WriteError(w, errdefs.Public(errdefs.ErrNotImplemented, r.Method+" "+r.URL.Path+" is not implemented by this server"))
}

// listEvents is GET /events/sandboxes[/{sandboxID}]: 200 and the events,
// as stored (the JSON a webhook receives).
func (a *API) listEvents(w http.ResponseWriter, r *http.Request) {
	f, err := ParseQuery(r.URL.Query())
	if err != nil {
		a.d.Fail(w, r, err)
		return
	}
	f.SandboxID = r.PathValue("sandboxID")
	evs, err := a.d.Store.ListEvents(r.Context(), a.d.Team(r), f)
	if err != nil {
		a.d.Fail(w, r, err)
		return
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, ev := range evs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(ev.Body)
	}
	b.WriteString("]\n")
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b.Bytes())
}

// Limits of the events query (E2B's).
const (
	DefaultLimit = 10
	MaxLimit     = 100
)

// ParseQuery reads the events query: offset (≥ 0), limit (1..100,
// default 10), orderAsc, and types (repeated; any of them).
func ParseQuery(q url.Values) (store.EventFilter, error) {
	f := store.EventFilter{Limit: DefaultLimit}
	bad := func(format string, args ...any) (store.EventFilter, error) {
		return store.EventFilter{}, errdefs.Publicf(errdefs.ErrInvalidArgument, format, args...)
	}
	if v := q.Get("offset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return bad("offset %q: want an integer of at least 0", v)
		}
		f.Offset = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLimit {
			return bad("limit %q: want an integer from 1 to %d", v, MaxLimit)
		}
		f.Limit = n
	}
	if v := q.Get("orderAsc"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return bad("orderAsc %q: want true or false", v)
		}
		f.Asc = b
	}
	for _, v := range q["types"] {
		for t := range strings.SplitSeq(v, ",") {
			if !events.Valid(t) {
				return bad("types: unknown event type %q (want one of %s)", t, strings.Join(events.Types, ", "))
			}
			if !slices.Contains(f.Types, t) {
				f.Types = append(f.Types, t)
			}
		}
	}
	return f, nil
}

func toWebhook(h store.Webhook) rest.Webhook {
	types := make([]rest.SandboxEventType, len(h.Events))
	for i, t := range h.Events {
		types[i] = rest.SandboxEventType(t)
	}
	return rest.Webhook{Id: h.ID, TeamId: h.Team, Name: h.Name, Url: h.URL, Enabled: h.Enabled, Events: types,
		CreatedAt: h.CreatedAt.UTC()}
}

// eventTypes checks a webhook's events: at least one, each known.
func eventTypes(in []rest.SandboxEventType) ([]string, error) {
	if len(in) == 0 {
		return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "events: want at least one of %s", strings.Join(events.Types, ", "))
	}
	var out []string
	for _, t := range in {
		if !events.Valid(string(t)) {
			return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "events: unknown event type %q (want one of %s)", t,
				strings.Join(events.Types, ", "))
		}
		if !slices.Contains(out, string(t)) {
			out = append(out, string(t))
		}
	}
	return out, nil
}

// check validates a webhook about to be stored.
func (a *API) check(h store.Webhook) error {
	if h.Secret == "" {
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "signatureSecret is required: every delivery is signed with it")
	}
	if len(h.Name) > 256 || len(h.URL) > 2048 || len(h.Secret) > 1024 {
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "name (256), url (2048) or signatureSecret (1024 bytes) too long")
	}
	return a.d.CheckURL(h.URL)
}

// createWebhook is POST /events/webhooks: 201 Webhook.
func (a *API) createWebhook(w http.ResponseWriter, r *http.Request) {
	var body rest.NewWebhook
	if !a.d.Decode(w, r, &body) {
		return
	}
	types, err := eventTypes(body.Events)
	if err != nil {
		a.d.Fail(w, r, err)
		return
	}
	h := store.Webhook{ID: uuid.NewString(), Team: a.d.Team(r), URL: body.Url, Enabled: true, Events: types,
		Secret: body.SignatureSecret, CreatedAt: time.Now().UTC()}
	if body.Name != nil {
		h.Name = *body.Name
	}
	if body.Enabled != nil {
		h.Enabled = *body.Enabled
	}
	if err := a.check(h); err != nil {
		a.d.Fail(w, r, err)
		return
	}
	if err := a.d.Store.CreateWebhook(r.Context(), h); err != nil {
		a.d.Fail(w, r, err)
		return
	}
	errhttp.WriteJSON(w, http.StatusCreated, toWebhook(h))
}

// updateWebhook is PATCH /events/webhooks/{webhookID}: the fields given
// replace the webhook's; 200 Webhook.
func (a *API) updateWebhook(w http.ResponseWriter, r *http.Request) {
	var body rest.WebhookUpdate
	if !a.d.Decode(w, r, &body) {
		return
	}
	h, err := a.d.Store.GetWebhook(r.Context(), a.d.Team(r), r.PathValue("webhookID"))
	if err != nil {
		a.d.Fail(w, r, err)
		return
	}
	if body.Events != nil {
		if h.Events, err = eventTypes(body.Events); err != nil {
			a.d.Fail(w, r, err)
			return
		}
	}
	for _, f := range []struct {
		v   *string
		dst *string
	}{{body.Name, &h.Name}, {body.Url, &h.URL}, {body.SignatureSecret, &h.Secret}} {
		if f.v != nil {
			*f.dst = *f.v
		}
	}
	if body.Enabled != nil {
		h.Enabled = *body.Enabled
	}
	if err := a.check(h); err != nil {
		a.d.Fail(w, r, err)
		return
	}
	if err := a.d.Store.UpdateWebhook(r.Context(), h); err != nil {
		a.d.Fail(w, r, err)
		return
	}
	errhttp.WriteJSON(w, http.StatusOK, toWebhook(h))
}

// getWebhook is GET /events/webhooks/{webhookID}: 200 Webhook.
func (a *API) getWebhook(w http.ResponseWriter, r *http.Request) {
	h, err := a.d.Store.GetWebhook(r.Context(), a.d.Team(r), r.PathValue("webhookID"))
	if err != nil {
		a.d.Fail(w, r, err)
		return
	}
	errhttp.WriteJSON(w, http.StatusOK, toWebhook(h))
}

// listWebhooks is GET /events/webhooks: 200 and the team's webhooks.
func (a *API) listWebhooks(w http.ResponseWriter, r *http.Request) {
	hs, err := a.d.Store.ListWebhooks(r.Context(), a.d.Team(r))
	if err != nil {
		a.d.Fail(w, r, err)
		return
	}
	out := make([]rest.Webhook, len(hs))
	for i, h := range hs {
		out[i] = toWebhook(h)
	}
	errhttp.WriteJSON(w, http.StatusOK, out)
}

// deleteWebhook is DELETE /events/webhooks/{webhookID}: 200, and its
// queued deliveries are dropped.
func (a *API) deleteWebhook(w http.ResponseWriter, r *http.Request) {
	if err := a.d.Store.DeleteWebhook(r.Context(), a.d.Team(r), r.PathValue("webhookID")); err != nil {
		a.d.Fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}
