-- Join tokens of the cluster (moat cluster token): a node presents one,
-- once, before it expires, to get its certificate from the cluster CA.
-- Only the SHA-256 of the token's secret is kept; used_at is 0 until it
-- is used. Times are Unix nanoseconds.
CREATE TABLE join_tokens (
	id          TEXT PRIMARY KEY,
	hash        TEXT NOT NULL,
	created_at  INTEGER NOT NULL,
	expires_at  INTEGER NOT NULL,
	used_at     INTEGER NOT NULL DEFAULT 0,
	used_by     TEXT NOT NULL DEFAULT ''
);
