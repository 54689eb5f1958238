-- Secrets: named per team, values write-only through the API. Each update
-- appends a version; a version's value is stored only encrypted
-- (AES-256-GCM, internal/secrets) under the key named by key_id, which is
-- kept outside this database (<data dir>/secrets.key), so that a key
-- rotation can re-encrypt row by row.
CREATE TABLE secrets (
	id              TEXT PRIMARY KEY,
	team            TEXT NOT NULL,
	name            TEXT NOT NULL,
	current_version INTEGER NOT NULL,
	metadata        TEXT NOT NULL,
	created_at      INTEGER NOT NULL,
	updated_at      INTEGER NOT NULL
);
CREATE UNIQUE INDEX secrets_team_name ON secrets (team, name);

CREATE TABLE secret_versions (
	secret_id  TEXT NOT NULL REFERENCES secrets (id) ON DELETE CASCADE,
	version    INTEGER NOT NULL,
	key_id     TEXT NOT NULL,
	ciphertext BLOB NOT NULL,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (secret_id, version)
);
