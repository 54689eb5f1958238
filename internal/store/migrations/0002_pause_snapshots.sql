ALTER TABLE sandboxes ADD COLUMN auto_resume INTEGER NOT NULL DEFAULT 0;
-- the lifetime asked for at create, in seconds: an auto-resume grants it again
ALTER TABLE sandboxes ADD COLUMN timeout_s INTEGER NOT NULL DEFAULT 0;

CREATE TABLE snapshots (
	id           TEXT PRIMARY KEY,
	name         TEXT NOT NULL DEFAULT '',
	sandbox_id   TEXT NOT NULL,
	template_id  TEXT NOT NULL,
	alias        TEXT NOT NULL DEFAULT '',
	runtime      TEXT NOT NULL,
	cpu_count    INTEGER NOT NULL DEFAULT 0,
	memory_mb    INTEGER NOT NULL DEFAULT 0,
	disk_size_mb INTEGER NOT NULL DEFAULT 0,
	env_vars     TEXT NOT NULL DEFAULT '{}',
	-- the source's envd token at the time: a fork's envd still has it
	-- until the fork's /init replaces it
	envd_access_token TEXT NOT NULL DEFAULT '',
	created_at   INTEGER NOT NULL
);

CREATE INDEX snapshots_sandbox ON snapshots (sandbox_id, created_at);
CREATE UNIQUE INDEX snapshots_name ON snapshots (name) WHERE name != '';
