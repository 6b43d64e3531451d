-- Durable steps, sleeps and events (ADR 0137, SPEC 6.1). A job's recorded steps
-- and the events sent to it are rows of their own, deleted with their job by the
-- cascade of their foreign key, as the journal is (ADR 16, 18): cleanup deletes
-- job rows only and these go with them.
--
-- A step row is written, fenced on the claim, by the run that completed the step
-- (`run_no`, the job's run_count then): `kind` is 'step' (ctx.step, `result` its
-- strict-JSON value), 'sleep' (ctx.sleep, numbered in call order, `wake_at` the
-- time it ends), 'wait' (the first ctx.wait_for of an event, `wake_at` its
-- deadline, NULL without a timeout) or 'timeout' (the wait that timed out, kept so
-- every later run times out too). `position` orders a job's steps as recorded.
-- Names PostgreSQL would derive are given here when longer than the seed's longest
-- suffix, so the longest prefix allowed stays what it was (naming.py).
CREATE TABLE {{prefix}}_checkpoints (
    job_id text NOT NULL
        CONSTRAINT {{prefix}}_checkpoints_job REFERENCES {{prefix}}_jobs (id) ON DELETE CASCADE,
    kind text NOT NULL
        CONSTRAINT {{prefix}}_checkpoints_kind CHECK (kind IN ('step', 'sleep', 'wait', 'timeout')),
    name text NOT NULL,
    position bigint GENERATED ALWAYS AS IDENTITY (SEQUENCE NAME {{prefix}}_checkpoints_seq),
    run_no integer NOT NULL,
    recorded_at timestamptz NOT NULL,
    result jsonb,
    wake_at timestamptz,
    PRIMARY KEY (job_id, kind, name)
);

-- One row per event sent to a job (`payload` JSON null when none); a second send of
-- the name is refused by the key. `sent_at` from the database clock.
CREATE TABLE {{prefix}}_events (
    job_id text NOT NULL REFERENCES {{prefix}}_jobs (id) ON DELETE CASCADE,
    name text NOT NULL,
    payload jsonb NOT NULL,
    sent_at timestamptz NOT NULL,
    PRIMARY KEY (job_id, name)
);

-- The run an event was sent during: a send to a claimed job sets it to the job's
-- run_count, and that run's paused finish makes the row visible at once, so an
-- event sent between the run's "no event yet" and its finish still wakes it (the
-- send updates the row, so the two serialize on its lock). Nullable without a
-- default: adding it rewrites no row (SPEC 5.1); no index.
ALTER TABLE {{prefix}}_jobs ADD COLUMN woken_run integer;
