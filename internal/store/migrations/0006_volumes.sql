-- Volumes (E2B's /volumes API): storage that outlives sandboxes, one ext4
-- image per volume under <data>/volumes. Names are unique per team; token
-- authorizes the volume content API (/volumecontent/{id}/...), as the
-- SDKs send it (Authorization: Bearer), and is returned by GET /volumes/{id}
-- like E2B does, so it is stored (as sandboxes' envd tokens are).
CREATE TABLE volumes (
	id         TEXT PRIMARY KEY,
	team       TEXT NOT NULL,
	name       TEXT NOT NULL,
	size_mb    INTEGER NOT NULL,
	token      TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	UNIQUE (team, name)
);

-- The volumes a sandbox mounts, as JSON [{volumeID, name, path}] ('' =
-- none): a restarted server holds them again for its live sandboxes.
ALTER TABLE sandboxes ADD COLUMN volume_mounts TEXT NOT NULL DEFAULT '';
