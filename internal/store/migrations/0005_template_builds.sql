-- Templates built over the API (E2B's template build API) belong to the
-- team of the key that built them; '' is "shared" (built with the CLI) and
-- visible to every team. config holds the process defaults the build's
-- ENV/WORKDIR/USER steps set, as JSON ('' = none).
ALTER TABLE templates ADD COLUMN team TEXT NOT NULL DEFAULT '';
ALTER TABLE templates ADD COLUMN config TEXT NOT NULL DEFAULT '';

-- One row per requested build. A template requested but never built has
-- only build rows: it reaches the templates table when a build is ready.
CREATE TABLE template_builds (
	id          TEXT PRIMARY KEY,
	template_id TEXT NOT NULL,
	name        TEXT NOT NULL,
	team        TEXT NOT NULL,
	status      TEXT NOT NULL,
	reason      TEXT NOT NULL DEFAULT '',
	reason_step TEXT NOT NULL DEFAULT '',
	cpu_count   INTEGER NOT NULL DEFAULT 0,
	memory_mb   INTEGER NOT NULL DEFAULT 0,
	created_at  INTEGER NOT NULL,
	updated_at  INTEGER NOT NULL
);

CREATE INDEX template_builds_template ON template_builds (template_id, created_at);
CREATE INDEX template_builds_name ON template_builds (name);
