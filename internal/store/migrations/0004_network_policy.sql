-- Per-sandbox network policy (E2B's SandboxNetworkConfig: allowOut,
-- denyOut, allowPublicTraffic) as JSON; '' is "none": rows from before it
-- existed had no policy beyond allow_internet.
ALTER TABLE sandboxes ADD COLUMN network TEXT NOT NULL DEFAULT '';
