-- rota schema, version 20 (SQLite): each worker's own lease in its registry row, so the
-- listings judge it by its lease, not the viewer's (issue 44). NULL: a worker of an older
-- release (judged by the viewer's lease, as before).
ALTER TABLE rota_workers ADD COLUMN lease REAL;
