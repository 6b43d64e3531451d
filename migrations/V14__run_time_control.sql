-- Control at run time (ADR 0139): what an operator changes while workers and beats
-- run, without a redeploy. No seed table changes (SPEC 5.1).

-- One row per kind an operator paused or gave limit overrides; a kind without a
-- row is running with its decorator's limits. The claim statements read `paused`
-- by primary key, one probe per served kind, so a paused kind is never claimed
-- whatever the worker has cached. A NULL override keeps the decorator's value.
-- rate_limit is stored as written ('<n>/s', '<n>/m', '<n>/h'), validated first.
CREATE TABLE {{prefix}}_kind_controls (
    kind text PRIMARY KEY,
    paused boolean NOT NULL DEFAULT false,
    global_concurrency integer CHECK (global_concurrency >= 1),
    rate_limit text,
    key_concurrency integer CHECK (key_concurrency >= 1),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Schedules added at run time, beside the ones declared in code. Beat reads them at
-- every iteration; their ticks carry the same `beat:<name>` dedup key as code
-- schedules, so one row holds each tick whichever beat enqueued it.
CREATE TABLE {{prefix}}_schedules (
    name text PRIMARY KEY,
    cron text NOT NULL,
    timezone text NOT NULL,
    kind text NOT NULL,
    kwargs jsonb NOT NULL DEFAULT '{}'::jsonb,
    paused boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The ticks a backfill enqueued, one row each: a second backfill of an overlapping
-- window enqueues only the ticks not yet in here (idempotent). Removing a schedule
-- removes its rows (a schedule added again under the name starts afresh).
CREATE TABLE {{prefix}}_backfills (
    name text NOT NULL REFERENCES {{prefix}}_schedules (name) ON DELETE CASCADE,
    tick timestamptz NOT NULL,
    job_id text NOT NULL,
    PRIMARY KEY (name, tick)
);

-- Every change an operator made: who (their --as name, or host:pid), what, when,
-- and the values given. Append-only; read per subject, newest first.
CREATE TABLE {{prefix}}_audit (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now(),
    actor text NOT NULL,
    subject_type text NOT NULL CHECK (subject_type IN ('kind', 'schedule')),
    subject text NOT NULL,
    action text NOT NULL,
    details jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX {{prefix}}_audit_subject ON {{prefix}}_audit (subject_type, subject, id);
