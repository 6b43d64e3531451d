-- The worker registry (ADR 0119): one row per running Worker, written by the
-- worker itself at start, refreshed by its heartbeat, deleted at stop; a row
-- whose heartbeat stopped is ignored by readers once expires_at has passed,
-- and deleted by the next heartbeat of any live worker.
--
-- The primary key is the only index: a heartbeat changes no indexed column,
-- so it is a HOT update, and the table holds one row per live worker, so the
-- sweep and the readers scan it whole.

CREATE TABLE {{prefix}}_workers (
    id text PRIMARY KEY,
    version text NOT NULL,
    kinds text[] NOT NULL,
    concurrency integer NOT NULL,
    running integer NOT NULL DEFAULT 0,
    started_at timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
