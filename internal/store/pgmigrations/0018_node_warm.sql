-- Warm pools on many machines (docs/cluster.md): the templates a node has
-- a ready warm member of, as its registrar last wrote them (a JSON array
-- of template IDs). Placement prefers such a node for a create of one.
ALTER TABLE nodes ADD COLUMN warm TEXT NOT NULL DEFAULT '[]';
