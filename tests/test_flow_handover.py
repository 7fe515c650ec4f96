"""The exclusive slot's hand-over on both stores: backfilled (queued) ticks run one after
another, each started within a wake-up of the end of the one before (not at the next poll),
by a real worker thread with a long poll interval."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

import rota

from .conftest import WITH_MYSQL, make_app, start_worker, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def test_backfilled_ticks_of_an_exclusive_schedule_start_one_after_another_without_polling(
    app_factory: Callable[..., rota.App],
) -> None:
    app = app_factory(poll_interval=30.0)  # a poll would take 30 s: only wake-ups can pass

    @app.task(name="job")
    def job() -> None:
        time.sleep(0.05)

    app.migrate()
    app.add_schedule("s", "job", every=60, overlap="queue")
    worker = start_worker(app, concurrency=2)
    time.sleep(0.5)  # the worker is up and idle
    now = app.store.now()
    refs = app.backfill("s", start=now - timedelta(minutes=6), end=now - timedelta(minutes=1))
    assert len(refs) == 5
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline and any(r.refresh().status != "succeeded" for r in refs):
        time.sleep(0.05)
    runs = [r.refresh() for r in refs]
    assert [r.status for r in runs] == ["succeeded"] * 5
    for before, after in itertools.pairwise(runs):
        assert before.finished_at is not None and after.started_at is not None
        assert after.started_at >= before.finished_at  # one after another
        assert after.started_at - before.finished_at < timedelta(seconds=3)  # a wake-up, not a poll
    worker.stop(wait=True, timeout=10)


def test_a_replacing_trigger_and_a_finish_of_the_same_schedule_never_deadlock(pg_url: str) -> None:
    """PostgreSQL: a finisher holds the schedule's row (it locks it first) and then promotes
    the queued run; a replacing trigger cancels the queued runs. The trigger now takes the
    schedule's row before any run, so it waits for the finish instead of deadlocking with it
    (it locked the queued run first, then waited for the row the finisher held)."""
    import psycopg

    app = make_app(pg_url)
    try:

        @app.task(name="job")
        def job() -> None: ...

        app.migrate()
        app.add_schedule("s", "job", every=3600, overlap="replace")
        app.trigger("s")
        (active,) = app.store.claim("w", 1, None, 30.0)
        app.trigger("s")  # replaces the running run: its successor is queued behind it
        errors: list[BaseException] = []
        with psycopg.connect(pg_url, autocommit=False) as finisher:
            finisher.execute("SET lock_timeout = '8s'")
            finisher.execute("SELECT name FROM rota_schedules WHERE name = 's' FOR UPDATE")

            def replace() -> None:
                try:
                    app.trigger("s")
                except BaseException as exc:
                    errors.append(exc)

            thread = threading.Thread(target=replace)
            thread.start()
            time.sleep(0.7)  # the trigger is waiting for a lock the finisher holds
            finisher.execute(
                "UPDATE rota_runs SET status = 'succeeded', finished_at = now(), lease_until = NULL WHERE id = %s",
                (active.id,),
            )
            finisher.commit()
        thread.join(15)
        assert not thread.is_alive() and errors == []
        pending = [r for r in app.list_runs(schedule="s") if r.status == "pending"]
        assert len(pending) >= 1 and sum(not r.queued for r in pending) == 1  # one active, the rest queued
    finally:
        app.close()
