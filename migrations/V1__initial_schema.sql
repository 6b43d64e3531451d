-- The two tables of the default adapter and the indexes they shipped with.
-- Later tuning happens in new versions (V3), never by editing this file.

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

-- Claim path (ADR 3, 20, 22); visible_at is left to a heap filter in V1.
CREATE INDEX {{prefix}}_jobs_claim
    ON {{prefix}}_jobs (kind, priority, created_at)
    WHERE status = 'pending';
CREATE INDEX {{prefix}}_jobs_claim_priority
    ON {{prefix}}_jobs (priority, created_at)
    WHERE status = 'pending';

-- Soonest future eligibility, for the worker's wait timeout (ADR 20).
CREATE INDEX {{prefix}}_jobs_visible
    ON {{prefix}}_jobs (kind, visible_at)
    WHERE status = 'pending';

-- Dedup candidacy lookup (ADR 10); non-unique because of `independent`.
CREATE INDEX {{prefix}}_jobs_dedup
    ON {{prefix}}_jobs (kind, dedup_key)
    WHERE dedup_key IS NOT NULL AND status = 'pending';

-- Stale-claim recovery (ADR 19).
CREATE INDEX {{prefix}}_jobs_lease
    ON {{prefix}}_jobs (claim_expires_at)
    WHERE status = 'claimed';

-- History listing and status-filtered cleanup (ADR 5, 18).
CREATE INDEX {{prefix}}_jobs_history
    ON {{prefix}}_jobs (status, kind, finished_at);

-- Journal per-job timeline and the FK cascade (ADR 16, 18).
CREATE INDEX {{prefix}}_journal_job
    ON {{prefix}}_journal (job_id);

-- Journal queries by kind over time (speculative; dropped in V3).
CREATE INDEX {{prefix}}_journal_kind
    ON {{prefix}}_journal (kind, recorded_at);
