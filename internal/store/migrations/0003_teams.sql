-- Teams: every API key belongs to one; sandboxes and snapshots belong to the
-- team of the key that created them and are invisible to other teams.
-- Rows from before teams existed belong to the default team.
ALTER TABLE api_keys ADD COLUMN team TEXT NOT NULL DEFAULT 'default';
ALTER TABLE sandboxes ADD COLUMN team TEXT NOT NULL DEFAULT 'default';
ALTER TABLE snapshots ADD COLUMN team TEXT NOT NULL DEFAULT 'default';

CREATE INDEX sandboxes_team_state_started ON sandboxes (team, state, started_at);

-- snapshot names are unique per team, not across teams (a taken name must
-- not reveal another team's snapshot)
DROP INDEX snapshots_name;
CREATE UNIQUE INDEX snapshots_team_name ON snapshots (team, name) WHERE name != '';
CREATE INDEX snapshots_team ON snapshots (team, created_at);
