-- Templates on many machines (docs/cluster.md): the nodes that hold a
-- checked copy of a template's tree, by digest. Placement prefers them,
-- and a node that needs the template asks them after its builder.
CREATE TABLE template_copies (
	template_id TEXT NOT NULL,
	node_id     TEXT NOT NULL,
	digest      TEXT NOT NULL,
	PRIMARY KEY (template_id, node_id)
);
