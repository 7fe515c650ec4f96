"""Smaller promises of issue 18, each on every store where it applies: the stuck count
without a heartbeat's lag, a SQLite file the worker cannot open refused at start, a SQLite
lease taken by another process noticed, a client read retried once across a cut."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import rota

from .conftest import WITH_MYSQL, start_worker, store_url
from .procs import ROOT, wait_until


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def test_the_stuck_count_does_not_lag_by_a_heartbeat(app_factory: Callable[..., rota.App]) -> None:
    """A thread past its timeout is stuck: app.stats() (this process's worker) and another
    client (the registry) show it, and its end, long before the next heartbeat (10 s)."""
    app = app_factory(lease=30.0)
    other = app_factory(lease=30.0)
    release = threading.Event()

    @app.task(name="hang", timeout=0.2)
    def hang() -> None:
        release.wait(30)

    worker = start_worker(app, concurrency=2)
    wait_until(lambda: app.stats()["workers"] == 1, 10, "the worker to register")
    hang.enqueue()
    wait_until(lambda: worker.stuck == 1, 10, "the handler to time out")
    wait_until(lambda: app.stats()["stuck"] == 1, 2, "app.stats() to show it")
    wait_until(lambda: other.stats()["stuck"] == 1, 2, "another client to see it in the registry")
    release.set()
    wait_until(lambda: worker.stuck == 0, 10, "the thread to return")
    wait_until(lambda: app.stats()["stuck"] == 0 and other.stats()["stuck"] == 0, 2, "both to show its end")


@contextlib.contextmanager
def _unwritable(folder: Path) -> Iterator[None]:
    """A directory this user cannot write: immutable for root (who ignores modes), 0555 else."""
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
            pytest.skip("chattr +i is not available here (root writes any directory)")
        undo = ["chattr", "-i", str(folder)]
    else:
        folder.chmod(0o555)
        undo = ["chmod", "755", str(folder)]
    try:
        yield
    finally:
        subprocess.run(undo, check=True)


def test_a_sqlite_database_the_worker_cannot_create_is_refused_at_start(tmp_path: Path) -> None:
    """Not retried forever as "database unavailable": refused with the reason, in one line."""
    folder = tmp_path / "locked"
    folder.mkdir()
    url = f"sqlite:///{folder}/rota.db"
    with _unwritable(folder):
        app = rota.App(url)
        worker = app.worker(install_signal_handlers=False)
        expected = r"cannot write in '.*locked', the directory of the SQLite database"
        with pytest.raises(rota.PermissionDenied, match=expected):
            asyncio.run(asyncio.wait_for(worker.run(), 10))
        app.close()
        cmd = [sys.executable, "-m", "rota", "--database-url", url, "worker", "tests.apps.basic:app"]
        env = {**os.environ, "ROTA_DATABASE_URL": url}
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        lines = [line for line in done.stderr.splitlines() + done.stdout.splitlines() if "cannot write in" in line]
        assert done.returncode != 0 and len(lines) == 1, done.stderr + done.stdout
        assert "Traceback" not in done.stderr + done.stdout


def test_a_sqlite_lease_taken_after_the_hosts_clock_stepped_is_lost_at_once(tmp_path: Path) -> None:
    """SQLite judges a lock's expiry on this host's clock: when that clock steps past the
    expiry (NTP, a resume from suspend: the monotonic clock did not move), another process
    takes the lock; the holder must know now, not at its next renewal (ttl/3 later)."""
    clock = rota.FakeClock()  # the host's clock, shared by both apps (two processes on one host)
    url = f"sqlite:///{tmp_path}/locks.db"
    holder, thief = rota.App(url, clock=clock), rota.App(url, clock=clock)
    try:
        lease = holder.try_lock("nightly", ttl=30)
        assert lease is not None and not lease.lost
        clock.advance(seconds=31)
        taken = thief.try_lock("nightly", ttl=30)
        assert taken is not None and taken.token == lease.token + 1
        assert lease.lost
        with pytest.raises(rota.LockLost):
            lease.__exit__(None, None, None)
        assert [lock.owner for lock in thief.list_locks()] == [taken.owner]  # ours not released
    finally:
        holder.close()
        thief.close()


def _cut(application_name: str) -> None:
    import psycopg

    from .conftest import PG_URL

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        sql = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s"
        assert conn.execute(sql, (application_name,)).fetchall(), "no connection to cut"


@pytest.mark.postgres
def test_a_named_lock_renewal_across_a_connection_cut_fails_softly_and_the_next_one_renews(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A renewal that meets a cut connection (a failover) is an unreachable backend: False,
    the lease still held until its TTL; the next renewal, on a new connection, extends it.
    (It raised DatabaseTransient: only an unreachable database was caught.)"""
    import uuid

    name = f"rota_lockcut_{uuid.uuid4().hex[:10]}"
    app = rota.App(f"{pg_url}&application_name={name}", retention=None)
    try:
        with app.lock("nightly", ttl=5, wait=0) as lease, caplog.at_level(logging.WARNING, "rota.locks"):
            _cut(name)
            assert lease._renew_due() is not None and not lease.lost  # the renewer's call: retried soon
            assert "lock 'nightly': renewal failed" in caplog.text and "terminating connection" in caplog.text
            assert lease.renew() is True and not lease.lost
            with pytest.raises(rota.LockUnavailable), app.lock("nightly", ttl=5, wait=0):
                pass
    finally:
        app.close()


@pytest.mark.postgres
def test_a_client_read_across_a_connection_cut_is_retried_once(pg_url: str) -> None:
    """The pooled connections are terminated (a failover, a restart): list_runs reads again on
    a new connection instead of raising DatabaseTransient."""
    import uuid

    import psycopg

    from .conftest import PG_URL

    name = f"rota_cut_{uuid.uuid4().hex[:10]}"
    app = rota.App(f"{pg_url}&application_name={name}", retention=None)

    @app.task(name="t")
    def t() -> None: ...

    t.enqueue()
    assert len(app.list_runs()) == 1
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        cut = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (name,)
        ).fetchall()
    assert cut
    wait_until(
        lambda: (
            not psycopg.connect(PG_URL, autocommit=True)
            .execute("SELECT 1 FROM pg_stat_activity WHERE application_name = %s", (name,))
            .fetchall()
        ),
        10,
        "the backends to end",
    )
    assert [r.task for r in app.list_runs()] == ["t"]
    assert app.get_run(app.list_runs()[0].id).task == "t"
    app.close()
