"""Transient write errors while runs finish: a per-database read-only period on PostgreSQL
(a failover as the workers see it) and a second SQLite connection holding the write lock past
the busy timeout. Neither may cost a finished result."""

from __future__ import annotations

import contextlib
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from ..conftest import PG_URL, make_app, require
from ..procs import WorkerProcs, wait_until
from .conftest import APP, all_final, enqueue_rec, starts, terminate_backends
from .invariants import check_invariants


def admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(sql)


@pytest.fixture
def own_database() -> Iterator[str]:
    """A database of our own (its settings are ours to change); dropped afterwards."""
    require("postgres")
    name = f"rota_faults_ro_{uuid.uuid4().hex[:8]}"
    admin(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(PG_URL)._replace(path=f"/{name}"))
    finally:
        admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.postgres
def test_read_only_period_loses_no_result(
    own_database: str, workers: Callable[[str], WorkerProcs], exec_log: Path
) -> None:
    """Runs finish while the database is read-only (the workers' sessions were terminated,
    their new ones are read-only, as during a failover); after it turns writable again every
    result is written by the worker that computed it."""
    name = urlsplit(own_database).path.lstrip("/")
    app_name = f"rota_faults_{uuid.uuid4().hex[:8]}"
    client = make_app(own_database)
    try:
        ids = enqueue_rec(client, 16, seconds=0.6)
        procs = workers(f"{own_database}?application_name={app_name}")
        procs.start(APP, concurrency=4, lease=3.0, poll=0.1)
        wait_until(lambda: starts(exec_log) >= 4, 30, "four runs to start")
        admin(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
        terminate_backends(app_name)
        time.sleep(2.0)  # runs finish meanwhile; their writes fail as read-only
        admin(f'ALTER DATABASE "{name}" SET default_transaction_read_only = off')
        terminate_backends(app_name)
        wait_until(all_final(client, ids), 60, "every run to end")
        runs = check_invariants(client, exec_log, enqueued=ids, leases_lost=False)
        assert {runs[i].status for i in ids} == {"succeeded"}
        assert all(runs[i].attempt == 1 for i in ids)
    finally:
        client.close()


def test_sqlite_write_lock_past_the_busy_timeout_loses_no_result(
    tmp_path: Path, workers: Callable[[str], WorkerProcs], exec_log: Path
) -> None:
    """Another connection holds SQLite's write lock (BEGIN IMMEDIATE) for 1.5 s, past the
    workers' 0.3 s busy timeout but within their lease, while runs finish."""
    url = f"sqlite:///{tmp_path}/rota.db"
    client = make_app(url)
    try:
        ids = enqueue_rec(client, 24, seconds=0.4)
        procs = workers(f"{url}?busy_timeout=0.3")
        for _ in range(2):
            procs.start(APP, concurrency=4, lease=3.0, poll=0.1)
        wait_until(lambda: starts(exec_log) >= 6, 30, "six runs to start")
        for _ in range(2):
            hold_write_lock(tmp_path / "rota.db", 1.5)
            time.sleep(0.5)
        wait_until(all_final(client, ids), 60, "every run to end")
        runs = check_invariants(client, exec_log, enqueued=ids, leases_lost=False)
        assert {runs[i].status for i in ids} == {"succeeded"}
        assert all(runs[i].attempt == 1 for i in ids)
    finally:
        client.close()


def hold_write_lock(path: Path, seconds: float) -> None:
    conn = sqlite3.connect(path, isolation_level=None, timeout=10)
    try:
        conn.execute("BEGIN IMMEDIATE")
        time.sleep(seconds)
        conn.execute("ROLLBACK")
    finally:
        with contextlib.suppress(sqlite3.Error):
            conn.close()
