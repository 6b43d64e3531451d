-- Chains and chords (ADR 0125). Every step of a workflow has a _steps row from
-- the workflow's enqueue on; its first steps are jobs at once, every other one
-- waits until its parents completed. The finish statement that completes a parent
-- counts its children down, and inserts a child whose count reaches 0 into _jobs
-- (same id) with its parents' results put into `input_arg` (the handler's first
-- positional parameter; NULL: an immutable `.si` step), as one value or, with
-- `input_all`, the list of them in edge position order. The seed's tables keep
-- their columns, constraints and indexes (SPEC 5.1): a job only gains its
-- workflow, nullable without a default, so adding it rewrites no row and a plain
-- job leaves it NULL (the finish reads it from the row it updates anyway).
ALTER TABLE {{prefix}}_jobs ADD COLUMN workflow_id text;

-- A step is `waiting` (parents not all completed), `enqueued` (a job now: its
-- state is the job's), or `dead` (a dependency ended dead before it became a job;
-- the note names it). `waiting_for` counts the parents not completed, also while
-- dead, so a retried dependency resumes the count. `result_awaited` carries a
-- waiter's mark (ADR 0124) into the job the step becomes.
CREATE TABLE {{prefix}}_steps (
    id text PRIMARY KEY,
    workflow_id text NOT NULL,
    kind text NOT NULL,
    payload jsonb NOT NULL,
    priority smallint NOT NULL,
    position integer NOT NULL,
    waiting_for integer NOT NULL,
    input_arg text,
    input_all boolean NOT NULL,
    status text NOT NULL CHECK (status IN ('waiting', 'enqueued', 'dead')),
    note text,
    created_at timestamptz NOT NULL,
    finished_at timestamptz,
    result_awaited boolean NOT NULL DEFAULT false
);
-- app.workflow(id): every step of one workflow, in position order.
CREATE INDEX {{prefix}}_steps_workflow ON {{prefix}}_steps (workflow_id, position);
-- Cleanup of dead steps, oldest first.
CREATE INDEX {{prefix}}_steps_ended ON {{prefix}}_steps (finished_at) WHERE status = 'dead';

-- One row per (parent, child) link: the finish finds a parent's children by the
-- primary key, and the child's parents (in `position` order) by _edges_child.
-- `result` is the parent's result, written by the finish that completes it: the
-- child's inputs are read from here, rows that exist from the workflow's enqueue
-- on (ADR 0125 says why not from the parents' job rows). No foreign keys: a
-- parent may be cleaned up while its child still waits, and cleanup deletes a
-- child's edges with it.
CREATE TABLE {{prefix}}_edges (
    parent_id text NOT NULL,
    child_id text NOT NULL,
    position integer NOT NULL,
    result jsonb,
    PRIMARY KEY (parent_id, child_id)
);
CREATE INDEX {{prefix}}_edges_child ON {{prefix}}_edges (child_id, position);
