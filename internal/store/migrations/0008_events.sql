-- Sandbox lifecycle events (E2B's events API; kept 7 days), teams'
-- webhooks, and the outbox of deliveries still to make: an event and its
-- deliveries are written in one transaction, so a server restart loses
-- none. body is the event's JSON exactly as listed and delivered.
CREATE TABLE sandbox_events (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	id         TEXT NOT NULL UNIQUE,
	team       TEXT NOT NULL,
	sandbox_id TEXT NOT NULL,
	type       TEXT NOT NULL,
	at         INTEGER NOT NULL,
	body       TEXT NOT NULL
);
CREATE INDEX sandbox_events_team ON sandbox_events (team, seq);
CREATE INDEX sandbox_events_sandbox ON sandbox_events (team, sandbox_id, seq);
CREATE INDEX sandbox_events_at ON sandbox_events (at);

-- secret is the signature secret, in the clear: every delivery is signed
-- with it (like envd access tokens, see store.Open on the file's mode).
CREATE TABLE webhooks (
	id         TEXT PRIMARY KEY,
	team       TEXT NOT NULL,
	name       TEXT NOT NULL,
	url        TEXT NOT NULL,
	enabled    INTEGER NOT NULL,
	events     TEXT NOT NULL,
	secret     TEXT NOT NULL,
	created_at INTEGER NOT NULL
);
CREATE INDEX webhooks_team ON webhooks (team);

CREATE TABLE webhook_deliveries (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	webhook_id TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
	event_seq  INTEGER NOT NULL REFERENCES sandbox_events (seq) ON DELETE CASCADE,
	attempts   INTEGER NOT NULL DEFAULT 0,
	next_at    INTEGER NOT NULL,
	last_error TEXT NOT NULL DEFAULT ''
);
CREATE INDEX webhook_deliveries_next ON webhook_deliveries (next_at);
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_seq);
