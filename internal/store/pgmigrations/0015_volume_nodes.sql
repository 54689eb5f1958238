-- Volumes on many machines (docs/cluster.md): node_id is the node whose
-- data dir holds the volume's image ('' = the server alone on its host);
-- a sandbox that mounts the volume is placed there, and the volume's API
-- and content API are sent on to it.
ALTER TABLE volumes ADD COLUMN node_id TEXT NOT NULL DEFAULT '';
