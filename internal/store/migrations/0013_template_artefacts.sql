-- Templates on many machines (docs/cluster.md): node_id is the node that
-- built the template and holds its root filesystem ('' = every node has
-- it at rootfs_dir, as the built-in templates); digest is the SHA-256 of
-- that tree's deterministic tar stream (package cluster/artefact), which
-- a node that copies the tree checks before it uses it.
ALTER TABLE templates ADD COLUMN node_id TEXT NOT NULL DEFAULT '';
ALTER TABLE templates ADD COLUMN digest TEXT NOT NULL DEFAULT '';
