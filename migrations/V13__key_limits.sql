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

-- Failure callbacks (`@task(on_dead=other)`, `apply_async(link_error=sig)`): when a
-- job becomes dead, by whatever statement (a finish at the backstop, a Fail, a time
-- limit, an expiry, a cancel, a recovery at the backstop), the callback job is
-- inserted by this trigger, in the statement's own transaction. The callback kind
-- of each kind is registered by the workers that serve it (their tasks' on_dead);
-- a job's own `venturi-link-error` header (`link_error=`) or its workflow's
-- callback (`chain(...).on_error(...)`) comes first.
CREATE TABLE {{prefix}}_dead_callbacks (
    kind text PRIMARY KEY,
    callback_kind text NOT NULL
);

-- The failure callback of a workflow (`chain(...).on_error(handler.s())`), for
-- each of its jobs that ends dead; written with the workflow.
CREATE TABLE {{prefix}}_workflow_callbacks (
    workflow_id text PRIMARY KEY,
    callback_kind text NOT NULL
);

-- A canonical ULID (48 bits of Unix milliseconds, 80 random bits, 26 Crockford
-- base-32 characters), the form of every job id (ADR 2), for rows made in SQL.
CREATE OR REPLACE FUNCTION {{prefix}}_new_id() RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    alphabet constant text := '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
    bits bit(130);
    id text := '';
BEGIN
    bits := B'00'
        || substring((floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)::bit(64)
                     FROM 17 FOR 48)
        || ('x' || substr(replace(gen_random_uuid()::text, '-', ''), 1, 20))::bit(80);
    FOR i IN 0..25 LOOP
        id := id || substr(alphabet, substring(bits FROM i * 5 + 1 FOR 5)::int + 1, 1);
    END LOOP;
    RETURN id;
END
$$;

-- The callback job: kwargs job_id, kind and note (the dead run's journal note),
-- NORMAL tier, due at once, with the wake-up NOTIFY (delivered at commit).
CREATE OR REPLACE FUNCTION {{prefix}}_enqueue_on_dead() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    target text;
    last_note text;
BEGIN
    target := coalesce(
        NEW.headers ->> 'venturi-link-error',
        (SELECT w.callback_kind FROM {{prefix}}_workflow_callbacks AS w
         WHERE NEW.workflow_id IS NOT NULL AND w.workflow_id = NEW.workflow_id),
        (SELECT c.callback_kind FROM {{prefix}}_dead_callbacks AS c WHERE c.kind = NEW.kind)
    );
    IF target IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT e.note INTO last_note
    FROM {{prefix}}_journal AS e WHERE e.job_id = NEW.id ORDER BY e.id DESC LIMIT 1;
    INSERT INTO {{prefix}}_jobs (id, kind, payload, priority, status, created_at, visible_at)
    VALUES ({{prefix}}_new_id(), target,
            jsonb_build_object('job_id', NEW.id, 'kind', NEW.kind, 'note', last_note),
            1, 'pending', clock_timestamp(), clock_timestamp());
    PERFORM pg_notify('{{prefix}}_wakeup', '');
    RETURN NULL;
END
$$;

-- Fires only for a row that becomes dead (the WHEN is tested as the row is
-- written, so other updates queue nothing); AFTER the statement's rows and its
-- journal entries are written, so the note is the death's.
CREATE TRIGGER {{prefix}}_on_dead
    AFTER UPDATE OF status ON {{prefix}}_jobs
    FOR EACH ROW
    WHEN (NEW.status = 'dead' AND OLD.status IS DISTINCT FROM 'dead')
    EXECUTE FUNCTION {{prefix}}_enqueue_on_dead();
