-- The cluster's node registry: every `moat serve` that runs sandboxes
-- (role node) registers itself here and renews its lease; a node whose
-- lease ran out is marked lost by whichever server sees it first, and
-- must register again (and reconcile) before it places anything.
-- runtimes is a JSON array; memory_mb and cpus what it offers sandboxes;
-- times are Unix nanoseconds.
CREATE TABLE nodes (
	id          TEXT PRIMARY KEY,
	addr        TEXT NOT NULL,
	runtimes    TEXT NOT NULL,
	memory_mb   INTEGER NOT NULL,
	cpus        INTEGER NOT NULL,
	version     TEXT NOT NULL,
	started_at  INTEGER NOT NULL,
	lease_until INTEGER NOT NULL,
	lost        INTEGER NOT NULL DEFAULT 0
);
-- The node that holds a sandbox ('' for rows from before the registry).
ALTER TABLE sandboxes ADD COLUMN node_id TEXT NOT NULL DEFAULT '';
CREATE INDEX sandboxes_node ON sandboxes (node_id);
