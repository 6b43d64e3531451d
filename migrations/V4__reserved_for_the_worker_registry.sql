-- Placeholder so that V5 applies in this branch: the worker registry's V4 is
-- written in another branch. Drop this file when that V4 is merged.
SELECT 1;
