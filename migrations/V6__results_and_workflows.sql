-- Results (ADR 0124), appended after the seed's columns (SPEC 5.1): the
-- handler's return value as strict JSON (SQL NULL: no result stored, JSON null:
-- the handler returned None), and whether someone waits for it, so the finish
-- statement sends a wake-up only for awaited jobs. `result` is nullable without
-- a default and `result_awaited` has a constant default: adding them rewrites no
-- row. Results go with their job at cleanup (they live on its row).
ALTER TABLE {{prefix}}_jobs ADD COLUMN result jsonb;
ALTER TABLE {{prefix}}_jobs ADD COLUMN result_awaited boolean NOT NULL DEFAULT false;
