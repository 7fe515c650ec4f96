ALTER TABLE rota_workers ADD COLUMN lease DOUBLE;
