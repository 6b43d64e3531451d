-- Limits across workers (ADR 0128): one row per kind that declares a global
-- cap or a rate limit, created by the first claim of that kind. The claim
-- transaction locks the row, so the claims of one limited kind are serialized
-- across every worker of the prefix. The running count is not stored: it is
-- the kind's claimed rows, so every outcome, release and stale recovery gives
-- its slot back without writing here, and a killed worker's slots come back
-- when its leases are recovered. next_start_at is the rate limiter's
-- theoretical arrival time (the earliest start not yet handed out).
CREATE TABLE {{prefix}}_claim_limits (
    kind text PRIMARY KEY,
    next_start_at timestamptz NOT NULL DEFAULT '-infinity'
);
