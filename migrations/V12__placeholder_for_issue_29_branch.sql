-- Placeholder so branch s29 migrates (versions must be 1..n without gaps): V12 belongs
-- to another issue's branch. The lead drops this file when merging s29 onto it.
SELECT 1;
