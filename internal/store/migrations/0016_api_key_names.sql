-- The team API keys API (GET/POST /api-keys, PATCH/DELETE
-- /api-keys/{id}): a key's name, and the last characters of its value for
-- its mask ('' for keys made before this migration: only their first
-- characters are known).
ALTER TABLE api_keys ADD COLUMN name TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN suffix TEXT NOT NULL DEFAULT '';
