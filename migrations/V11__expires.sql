-- Expiry (ADR 0135, SPEC 6.6): `expires_at` is the time after which the job
-- may not start a run; a claim at or after it ends the job `dead`, note
-- `expired`, without calling its handler. NULL (every job enqueued without
-- `expires`, and every row written before this migration) never expires.
-- Appended after the other columns, nullable without a default: adding it
-- rewrites no row (SPEC 5.1). No index: no statement looks rows up by it; the
-- claim computes its test on the rows it has already claimed (ADR 0135).
ALTER TABLE {{prefix}}_jobs ADD COLUMN expires_at timestamptz;
