-- Chains and chords (ADR 0125). Every step of a workflow is a job row from the
-- moment the workflow is enqueued: the first steps `pending`, the others
-- `waiting` (never claimed: every claim index is partial on `pending`), each with
-- `waiting_for`, the number of its parents not yet completed. The finish
-- statement that completes a parent counts its children down and makes a child
-- whose count reaches 0 pending, with its parents' results put into
-- `input_arg` (the handler's first positional parameter; NULL: an immutable
-- step, `.si`), the one result, or with `input_all` the list of them in edge
-- position order. All four columns are nullable without a default: adding them
-- rewrites no row, and a plain job leaves them NULL.
ALTER TABLE {{prefix}}_jobs ADD COLUMN workflow_id text;
ALTER TABLE {{prefix}}_jobs ADD COLUMN waiting_for integer;
ALTER TABLE {{prefix}}_jobs ADD COLUMN input_arg text;
ALTER TABLE {{prefix}}_jobs ADD COLUMN input_all boolean;
-- The step's place in its workflow as built (app.workflow lists steps by it).
ALTER TABLE {{prefix}}_jobs ADD COLUMN step_position integer;

-- `waiting` joins the statuses. NOT VALID: the old rows all pass the new check,
-- so they are not scanned under the table's lock.
ALTER TABLE {{prefix}}_jobs DROP CONSTRAINT {{prefix}}_jobs_status_check;
ALTER TABLE {{prefix}}_jobs ADD CONSTRAINT {{prefix}}_jobs_status_check
    CHECK (status IN ('pending', 'claimed', 'completed', 'dead', 'waiting')) NOT VALID;

-- app.workflow(id): the steps of one workflow; plain jobs are not in the index.
CREATE INDEX {{prefix}}_jobs_workflow
    ON {{prefix}}_jobs (workflow_id)
    WHERE workflow_id IS NOT NULL;

-- One row per (parent, child) link: the finish finds a parent's children by the
-- primary key, and the child's parents (in `position` order) by _edges_child.
-- `result` is the parent's result, written by the finish that completes it: the
-- child's inputs are read from here, rows that exist from the workflow's enqueue
-- on (ADR 0125 says why not from the parents' job rows). No foreign key: a
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
