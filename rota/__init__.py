"""rota: a job scheduler and task queue backed by your database."""
