-- PLACEHOLDER on branch dash only: other branches own migration 0006; delete this file at merge.
SELECT 1;
