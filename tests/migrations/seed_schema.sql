-- The seed document's effective DDL through V3, verbatim (its ```sql blocks),
-- kept here so the schema test does not depend on files outside the repository.

CREATE TABLE {{prefix}}_jobs (
id text PRIMARY KEY,
kind text NOT NULL,
payload jsonb NOT NULL,
priority smallint NOT NULL DEFAULT 1
CHECK (priority IN (0, 1, 2)),
status text NOT NULL
CHECK (status IN ('pending', 'claimed', 'completed', 'dead')),
created_at timestamptz NOT NULL,
visible_at timestamptz NOT NULL,
claim_expires_at timestamptz,
claimed_by text,
finished_at timestamptz,
run_count integer NOT NULL DEFAULT 0,
failure_count integer NOT NULL DEFAULT 0,
carry jsonb NOT NULL DEFAULT 'null'::jsonb,
dedup_key text
);

CREATE TABLE {{prefix}}_journal (
id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
job_id text NOT NULL
REFERENCES {{prefix}}_jobs (id) ON DELETE CASCADE,
kind text NOT NULL,
run_no integer NOT NULL,
recorded_at timestamptz NOT NULL,
outcome text NOT NULL
CHECK (outcome IN ('completed', 'paused', 'retried',
'dead', 'stale-recovered',
'released', 'merged')),
note text,
attachment jsonb
);

-- #1 Claim path: highest-priority oldest eligible row per kind (ADR 3, 20, 22).
-- Two complementary partial indexes; the planner picks per query. `visible_at` is
-- a trailing key column (V3), filtered in-index without a heap fetch.
CREATE INDEX {{prefix}}_jobs_claim
ON {{prefix}}_jobs (kind, priority, created_at, visible_at)
WHERE status = 'pending';
CREATE INDEX {{prefix}}_jobs_claim_priority
ON {{prefix}}_jobs (priority, created_at, visible_at)
WHERE status = 'pending';
-- #2 Soonest future eligibility, for the worker's wait timeout (ADR 20).
CREATE INDEX {{prefix}}_jobs_visible
ON {{prefix}}_jobs (kind, visible_at)
WHERE status = 'pending';
-- #3 Deduplication candidacy lookup (ADR 10). Non-unique (see note). Trailing
-- `created_at` (V3) returns the oldest pending sibling without a sort.
CREATE INDEX {{prefix}}_jobs_dedup
ON {{prefix}}_jobs (kind, dedup_key, created_at)
WHERE dedup_key IS NOT NULL AND status = 'pending';
-- #4 Stale-claim recovery: expired leases (ADR 19).
CREATE INDEX {{prefix}}_jobs_lease
ON {{prefix}}_jobs (claim_expires_at)
WHERE status = 'claimed';
-- #5 History listing and status-filtered cleanup (ADR 5, ADR 18).
CREATE INDEX {{prefix}}_jobs_history
ON {{prefix}}_jobs (status, kind, finished_at);
-- #6 Status-less terminal-job cleanup (V3): partial on terminal rows.
CREATE INDEX {{prefix}}_jobs_finished
ON {{prefix}}_jobs (finished_at)
WHERE finished_at IS NOT NULL;
-- History keyset pagination (V2): `created_at DESC, id DESC` backward scan.
CREATE INDEX {{prefix}}_jobs_created
ON {{prefix}}_jobs (created_at, id);
-- #7 Journal per-job timeline and the FK cascade (ADR 16, ADR 18). Trailing `id`
-- (V3) returns the timeline in order without a sort.
CREATE INDEX {{prefix}}_journal_job
ON {{prefix}}_journal (job_id, id);
