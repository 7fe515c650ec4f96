-- PLACEHOLDER on branch dash only: other branches own migration 0007; delete this file at merge.
SELECT 1;
