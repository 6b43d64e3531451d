-- Limits per key and shared limits (ADR 0138). The per-key cap needs no storage:
-- a keyed kind's claim key is written to `fair_key` (V10) at enqueue, its slots
-- are its claimed rows (counted inside the claim transaction), so every way a
-- claim ends gives its slot back without writing here.
--
-- The rate of each key of a kind with `rate_key=`: the key's next start (the
-- theoretical arrival time, as `_claim_limits.next_start_at`). A row per key
-- that has started a job; written by the claim that takes the key's jobs.
CREATE TABLE {{prefix}}_key_rates (
    kind text NOT NULL,
    key text NOT NULL,
    next_start_at timestamptz NOT NULL,
    PRIMARY KEY (kind, key)
);

-- Limits declared once with `app.limit(name, ...)` and shared by the kinds that
-- name them in `limits=`. The claim locks the row (after the kinds' rows in
-- `_claim_limits`, both in name order) so the claims of every kind sharing it
-- are serialized; the running count is the kinds' claimed rows, never stored.
CREATE TABLE {{prefix}}_shared_limits (
    name text PRIMARY KEY,
    next_start_at timestamptz NOT NULL DEFAULT '-infinity'
);
