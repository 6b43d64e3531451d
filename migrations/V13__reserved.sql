-- Reserved for another branch of this wave (the lead replaces this file with that
-- branch's V13 at merge): migration versions must run 1..n without gaps, and this
-- branch's own storage is V14. It changes nothing.
SELECT 1;
