package store

import "github.com/moatsh/moat/internal/store/eventstore"

// The events, webhooks and webhook-delivery tables live in eventstore; DB
// embeds them (AppendEvent, ListEvents, PruneEvents, the webhook CRUD and
// the delivery outbox) and these names keep their types where callers look.
type (
	// Event is one stored sandbox lifecycle event.
	Event = eventstore.Event
	// EventFilter selects a team's events.
	EventFilter = eventstore.EventFilter
	// Webhook is a team's webhook.
	Webhook = eventstore.Webhook
	// Delivery is a queued delivery of an event to a webhook.
	Delivery = eventstore.Delivery
)
