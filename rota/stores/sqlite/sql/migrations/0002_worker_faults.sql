-- Handler threads of a worker still running after their run timed out or lost its lease.
ALTER TABLE rota_workers ADD COLUMN stuck INTEGER NOT NULL DEFAULT 0;
