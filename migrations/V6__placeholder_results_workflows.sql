-- PLACEHOLDER, not for merging: V6 (results and workflows) is written in another
-- branch; this file only fills the number so that V7 applies in this branch's
-- tests. The merge takes the real V6 and deletes this file.
SELECT 1;
