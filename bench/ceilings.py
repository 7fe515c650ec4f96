"""The ceilings: raw claim/complete loops with nothing else, run as one worker process.

They claim like a real queue would (status, owner, a new fencing token per claim, a lease
deadline, an attempt count; SKIP LOCKED on PostgreSQL, one write transaction on SQLite), call
a no-op handler per job (for W7 the small real job instead: one Redis INCR, inline), and
complete the batch in one token-checked write. No history, metrics, heartbeats or retries:
the practical limit of a Python process on this machine, not a competitor. The loop reports
its jobs to the probe after each completion commits, so for these systems "handled" already
means "done in the database". Once the queue is empty the loop idles (a claim every 10 ms)
until the measuring process stops it, so its connection is still there for the CPU reading.
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import procs, small_job
from bench.core import Ctx, Metrics
from bench.dbs import PgProbe, fresh_pg, fresh_sqlite, sqlite_scalar
from bench.measure import StartWorkers, measure_drain
from bench.probe import probe

PG_SCHEMA = """
CREATE TABLE jobs (
    id bigserial PRIMARY KEY,
    task text NOT NULL,
    args jsonb NOT NULL DEFAULT '[]',
    status text NOT NULL DEFAULT 'pending',
    run_at timestamptz NOT NULL DEFAULT now(),
    owner text,
    token bigint,
    lease_until timestamptz,
    attempts int NOT NULL DEFAULT 0,
    started_at timestamptz,
    finished_at timestamptz,
    result jsonb
);
CREATE SEQUENCE jobs_token;
CREATE INDEX jobs_due ON jobs (run_at, id) WHERE status = 'pending';
"""

PG_CLAIM = """
WITH due AS (
    SELECT id FROM jobs WHERE status = 'pending' AND run_at <= now()
    ORDER BY run_at, id LIMIT %(n)s FOR UPDATE SKIP LOCKED
)
UPDATE jobs j SET status = 'running', owner = %(owner)s, token = nextval('jobs_token'),
    lease_until = now() + interval '30 seconds', attempts = j.attempts + 1, started_at = now()
FROM due WHERE j.id = due.id
RETURNING j.id, j.token, j.task, j.args
"""

PG_COMPLETE = """
UPDATE jobs j SET status = 'succeeded', finished_at = now(), result = 'null', lease_until = NULL
FROM unnest(%s::bigint[], %s::bigint[]) AS done(id, token)
WHERE j.id = done.id AND j.token = done.token AND j.status = 'running'
"""

SQLITE_SCHEMA = """
CREATE TABLE jobs (
    id INTEGER PRIMARY KEY,
    task TEXT NOT NULL,
    args TEXT NOT NULL DEFAULT '[]',
    status TEXT NOT NULL DEFAULT 'pending',
    run_at REAL NOT NULL,
    owner TEXT,
    token INTEGER,
    lease_until REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    started_at REAL,
    finished_at REAL,
    result TEXT
);
CREATE INDEX jobs_due ON jobs (run_at, id) WHERE status = 'pending';
"""

SQLITE_CLAIM = """
UPDATE jobs SET status = 'running', owner = ?, token = ?, lease_until = ? + 30,
    attempts = attempts + 1, started_at = ?
WHERE id IN (
    SELECT id FROM jobs WHERE status = 'pending' AND run_at <= ? ORDER BY run_at, id LIMIT ?
)
RETURNING id, token, task, args
"""

SQLITE_COMPLETE = """
UPDATE jobs SET status = 'succeeded', finished_at = ?, result = 'null', lease_until = NULL
WHERE id = ? AND token = ? AND status = 'running'
"""

NOT_DONE = "SELECT count(*) FROM jobs WHERE status <> 'succeeded'"


def handler(*_: Any) -> None:
    """The no-op job."""


def incr_handler(*_: Any) -> None:
    """W7's small real job, run inline."""
    small_job.incr()


HANDLERS = {"noop": handler, "incr": incr_handler}


def _report(count: int, first_start: float) -> None:
    bench_probe = probe()
    if bench_probe is not None:
        bench_probe.jobs_done(count, first_start)


def psycopg_worker(url: str, batch: int, job: str = "noop") -> None:
    """Claim `batch` with a CTE + SKIP LOCKED, run them, complete them in one UPDATE."""
    import psycopg

    run = HANDLERS[job]
    owner = f"raw-{uuid.uuid4()}"
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            started = time.time()
            rows = conn.execute(PG_CLAIM, {"n": batch, "owner": owner}).fetchall()
            if not rows:  # drained: idle until stopped (its backend stays, for CPU readings)
                time.sleep(0.01)
                continue
            for _, _, task, args in rows:
                run(task, args)
            conn.execute(PG_COMPLETE, ([r[0] for r in rows], [r[1] for r in rows]))
            _report(len(rows), started)


def _sqlite_connect(path: str, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    return conn


def sqlite_worker(path: str, batch: int, synchronous: str, job: str = "noop") -> None:
    """One write transaction claims `batch`; another completes them (token-checked)."""
    run = HANDLERS[job]
    owner = f"raw-{uuid.uuid4()}"
    conn = _sqlite_connect(path, synchronous)
    while True:
        started = now = time.time()
        conn.execute("BEGIN IMMEDIATE")
        args = (owner, random.getrandbits(62), now, now, now, batch)
        rows = conn.execute(SQLITE_CLAIM, args).fetchall()
        conn.execute("COMMIT")
        if not rows:
            time.sleep(0.01)
            continue
        for _, _, task, job_args in rows:
            run(task, job_args)
        done = time.time()
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(SQLITE_COMPLETE, [(done, r[0], r[1]) for r in rows])
        conn.execute("COMMIT")
        _report(len(rows), started)


def _start(ctx: Ctx, func: str, kwargs: dict[str, Any]) -> StartWorkers:
    def start(probe_path: Path) -> Sequence[procs.Worker]:
        log = ctx.dir / "raw-worker.log"
        return [procs.spawn_function(f"{__name__}:{func}", kwargs, log, probe_path)]

    return start


def psycopg_drain(ctx: Ctx, batch: int = 100, job: str = "noop") -> Metrics:
    """W1 (no-op) or W7 (`job="incr"`, ctx.real_jobs jobs) drain of the raw psycopg loop."""
    jobs = ctx.real_jobs if job == "incr" else ctx.jobs
    with fresh_pg(ctx) as url, _job_env(ctx, job, jobs):
        check = PgProbe(url)
        try:
            check.execute(PG_SCHEMA)
            check.execute(f"INSERT INTO jobs (task) SELECT 'noop' FROM generate_series(1, {jobs:d})")
            check.execute("VACUUM ANALYZE jobs")
            start = _start(ctx, "psycopg_worker", {"url": url, "batch": batch, "job": job})
            return measure_drain(ctx, jobs, start, lambda: check.scalar(NOT_DONE) == 0, pg_url=url)
        finally:
            check.close()


def _job_env(ctx: Ctx, job: str, jobs: int) -> contextlib.AbstractContextManager[object]:
    return small_job.counter(ctx, jobs) if job == "incr" else contextlib.nullcontext()


def sqlite_drain(ctx: Ctx, batch: int = 100, synchronous: str = "FULL", job: str = "noop") -> Metrics:
    """W1 (no-op) or W7 (`job="incr"`, ctx.real_jobs jobs) drain of the raw sqlite3 loop."""
    jobs = ctx.real_jobs if job == "incr" else ctx.jobs
    with _job_env(ctx, job, jobs):
        return _sqlite_drain(ctx, jobs, batch, synchronous, job)


def _sqlite_drain(ctx: Ctx, jobs: int, batch: int, synchronous: str, job: str) -> Metrics:
    path = fresh_sqlite(ctx, "raw.db")
    conn = _sqlite_connect(str(path), synchronous)
    conn.executescript(SQLITE_SCHEMA)
    now = time.time()
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO jobs (task, run_at) VALUES ('noop', ?)", [(now,)] * jobs)
    conn.execute("COMMIT")
    conn.close()
    kwargs = {"path": str(path), "batch": batch, "synchronous": synchronous, "job": job}
    start = _start(ctx, "sqlite_worker", kwargs)
    return measure_drain(ctx, jobs, start, lambda: sqlite_scalar(path, NOT_DONE) == 0)
