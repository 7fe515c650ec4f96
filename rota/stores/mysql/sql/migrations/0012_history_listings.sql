CREATE INDEX rota_runs_task_status ON rota_runs (task, status, id);
CREATE INDEX rota_runs_schedule_status ON rota_runs (schedule, status, id);
