-- Filesystem-only pause (E2B's memory: false): auto_pause_fs says the
-- sandbox's auto-pause keeps only its files (autoPauseMemory: false at
-- create); paused_fs that its current pause dropped its memory, so a
-- resume boots it from its files and traffic does not auto-resume it.
ALTER TABLE sandboxes ADD COLUMN auto_pause_fs BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN paused_fs BIGINT NOT NULL DEFAULT 0;
