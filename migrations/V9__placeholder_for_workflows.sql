-- TEMPORARY placeholder on the fair-claims branch only: the loader wants
-- versions 1..n without gaps, and V9 is written on another branch (chain/chord).
-- The lead replaces this file with that branch's V9 at merge.
SELECT 1;
