"""A run the database does not have any more (deleted by hand, or its claim's write lost when
an asynchronous replica was promoted): the worker holding it reports it once, in one line
that says so, stops it, discards its result, and goes on with the next runs."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

import rota

from . import mysql_db
from .conftest import WITH_MYSQL, start_worker, store_url, wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def delete_run(url: str, run_id: int) -> None:
    """Delete the run's row behind rota's back, as a promoted replica that never saw it would."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute("DELETE FROM rota_runs WHERE id = ?", (run_id,))
        return
    if url.startswith("mysql"):
        mysql_db.execute(url, f"DELETE FROM rota_runs WHERE id = {int(run_id)}")
        return
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM rota_runs WHERE id = %s", (run_id,))


def test_a_run_missing_from_the_database_is_reported_once_and_the_worker_goes_on(
    db_url: str, app_factory: Callable[..., rota.App], caplog: pytest.LogCaptureFixture
) -> None:
    app = app_factory(lease=0.9)
    started, release = threading.Event(), threading.Event()

    @app.task(name="held")
    def held() -> str:
        started.set()
        release.wait(20)
        return "done"

    @app.task(name="next")
    def next_one() -> str:
        return "next"

    caplog.set_level(logging.INFO, logger="rota")
    handle = held.enqueue()
    start_worker(app, concurrency=2)
    wait_for(started.is_set, what="the run to start")
    delete_run(db_url, int(handle.id))
    wait_for(lambda: any("no such run" in r.getMessage() for r in caplog.records), what="the report")
    release.set()
    after = next_one.enqueue()
    wait_for(lambda: app.get_run(after.id).status == "succeeded", what="the next run")
    lines = [r for r in caplog.records if str(handle.id) in r.getMessage() and r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in lines] == [
        f"run {handle.id} (held): lease lost (the database has no such run: deleted, or a write lost in a "
        "failover to an asynchronous replica); stopping it, its result will be discarded"
    ]
    assert getattr(lines[0], "event", None) == "run_missing"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
