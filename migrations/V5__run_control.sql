-- Run control (ADR 0121), appended after the seed's columns (SPEC 5.1):
-- the traceback of a failed run, stored with its journal entry, and the time
-- an operator asked a running job to stop. Both nullable without a default, so
-- adding them rewrites no row and existing statements are unaffected.
ALTER TABLE {{prefix}}_journal ADD COLUMN traceback text;
ALTER TABLE {{prefix}}_jobs ADD COLUMN cancel_requested_at timestamptz;
