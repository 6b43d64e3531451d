-- Keyset pagination of the history listing, newest first (ADR 18):
-- `ORDER BY created_at DESC, id DESC` is a backward scan of this index.
CREATE INDEX {{prefix}}_jobs_created
    ON {{prefix}}_jobs (created_at, id);
