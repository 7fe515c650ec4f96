-- Placeholder on branch flow-deps: numbers 0005-0009 belong to other branches (the lead
-- deletes this file at merge and renumbers 0010_flow_deps if needed). Does nothing.
SELECT 1;
