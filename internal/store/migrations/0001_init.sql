CREATE TABLE templates (
	id              TEXT PRIMARY KEY,
	name            TEXT NOT NULL UNIQUE,
	build_id        TEXT NOT NULL DEFAULT '',
	rootfs_dir      TEXT NOT NULL DEFAULT '',
	cpu_count       INTEGER NOT NULL DEFAULT 0,
	memory_mb       INTEGER NOT NULL DEFAULT 0,
	disk_size_mb    INTEGER NOT NULL DEFAULT 0,
	envd_version    TEXT NOT NULL DEFAULT '',
	runtime         TEXT NOT NULL DEFAULT '',
	created_at      INTEGER NOT NULL,
	updated_at      INTEGER NOT NULL,
	spawn_count     INTEGER NOT NULL DEFAULT 0,
	last_spawned_at INTEGER
);

CREATE TABLE api_keys (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	hash       TEXT NOT NULL UNIQUE,
	prefix     TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	last_used  INTEGER
);

CREATE TABLE sandboxes (
	id                TEXT PRIMARY KEY,
	template_id       TEXT NOT NULL,
	alias             TEXT NOT NULL DEFAULT '',
	state             TEXT NOT NULL,
	runtime           TEXT NOT NULL DEFAULT '',
	addr              TEXT NOT NULL DEFAULT '',
	started_at        INTEGER NOT NULL,
	end_at            INTEGER NOT NULL,
	metadata          TEXT NOT NULL DEFAULT '{}',
	env_vars          TEXT NOT NULL DEFAULT '{}',
	envd_access_token TEXT NOT NULL DEFAULT '',
	secure            INTEGER NOT NULL DEFAULT 0,
	allow_internet    INTEGER NOT NULL DEFAULT 1,
	auto_pause        INTEGER NOT NULL DEFAULT 0,
	cpu_count         INTEGER NOT NULL DEFAULT 0,
	memory_mb         INTEGER NOT NULL DEFAULT 0,
	disk_size_mb      INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX sandboxes_state_started ON sandboxes (state, started_at);
