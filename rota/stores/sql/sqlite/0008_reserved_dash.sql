-- PLACEHOLDER on branch dash only: other branches own migration 0008; delete this file at merge.
SELECT 1;
