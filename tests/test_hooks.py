"""Event hooks (@app.on): once per event, the stored record, never slowing the worker."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import rota
import rota.testing
from rota.events import Event

from .conftest import WITH_MYSQL, make_app, start_worker, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def record_all(app: rota.App) -> list[Event]:
    seen: list[Event] = []
    app.on(*rota.events.EVENTS)(seen.append)
    return seen


def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_unknown_event_names_are_refused_listing_the_valid_ones(tmp_path: Any) -> None:
    app = make_app(f"sqlite:///{tmp_path}/rota.db")
    with pytest.raises(rota.ConfigurationError, match=r"unknown event 'run_fail'.*run_failed.*valid: run_succeeded"):
        app.on("run_fail")
    with pytest.raises(rota.ConfigurationError, match="at least one event"):
        app.on()
    with pytest.raises(rota.ConfigurationError, match="timeout"):
        app.on("run_failed", timeout=-1)


def test_each_outcome_fires_once_with_the_stored_run(app_factory: Any) -> None:
    app = app_factory()
    seen = record_all(app)
    async_seen: list[tuple[str, str | None]] = []

    @app.on("run_failed", "run_succeeded")
    async def on_async(event: Event) -> None:
        async_seen.append((event.name, event.run_id))

    @app.task(name="ok")
    def ok(x: int) -> int:
        return x * 2

    @app.task(name="bad", retries=1, backoff=0.01)
    def bad() -> None:
        raise ValueError("boom")

    good, failing = ok.enqueue(21), bad.enqueue()
    worker = start_worker(app)
    good.wait(10)
    failing.wait(10)
    worker.stop(wait=True, timeout=10)
    assert app.events.drain(5)
    names = Counter((e.name, e.run_id) for e in seen)
    assert names == Counter(
        {
            ("worker_started", None): 1,
            ("run_succeeded", good.id): 1,
            ("run_retrying", failing.id): 1,
            ("run_failed", failing.id): 1,
            ("worker_stopped", None): 1,
        }
    )
    by_name = {e.name: e for e in seen}
    assert by_name["run_succeeded"].run is not None and by_name["run_succeeded"].run.result == 42
    assert by_name["run_succeeded"].worker_id == worker.id and by_name["run_succeeded"].task == "ok"
    failed = by_name["run_failed"].run
    assert failed is not None and failed.status == "failed" and failed.attempt == 2
    assert failed.error is not None and "boom" in failed.error["message"]
    assert sorted(async_seen) == sorted([("run_succeeded", good.id), ("run_failed", failing.id)])


def test_rescue_fires_in_the_rescuing_worker(db_url: str) -> None:
    clock = rota.FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
    app = make_app(db_url, clock=clock)
    seen = record_all(app)

    @app.task(name="work", retries=1)
    def work() -> str:
        return "done"

    @app.task(name="once")
    def once() -> None:
        pass

    retried, lost = work.enqueue(), once.enqueue()
    claimed = app.store.claim("dead-host:1", 10, None, 5.0)  # a worker that then dies
    assert {str(c.id) for c in claimed} == {retried.id, lost.id}
    clock.advance(timedelta(seconds=6))
    rota.testing.run_pending(app)
    assert app.events.drain(5)
    got = Counter((e.name, e.run_id) for e in seen)
    assert got == Counter(
        {
            ("run_rescued", retried.id): 1,
            ("run_retrying", retried.id): 1,
            ("run_succeeded", retried.id): 1,
            ("run_rescued", lost.id): 1,
            ("run_failed", lost.id): 1,
        }
    )
    failed = next(e for e in seen if e.name == "run_failed")
    assert failed.run is not None and failed.run.status == "failed" and "dead-host:1" in (failed.detail or "")
    rescued = next(e for e in seen if e.name == "run_rescued" and e.run_id == lost.id)
    assert rescued.worker_id is not None and rescued.worker_id != "dead-host:1"
    app.close()


def test_misfire_fires_schedule_misfired_once_and_run_skipped_per_tick(db_url: str) -> None:
    clock = rota.FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
    app = make_app(db_url, clock=clock)
    seen = record_all(app)

    @app.schedule(every=timedelta(minutes=1), name="minutely", misfire="skip", misfire_grace=1)
    def minutely() -> None:
        pass

    rota.testing.run_pending(app)  # registers the schedule; first tick in a minute
    clock.advance(timedelta(minutes=3, seconds=10))  # three ticks, each more than 1 s late
    assert rota.testing.run_pending(app) == 0
    assert app.events.drain(5)
    misfired = [e for e in seen if e.name == "schedule_misfired"]
    skipped = [e for e in seen if e.name == "run_skipped"]
    assert len(misfired) == 1 and misfired[0].schedule is not None and misfired[0].schedule.name == "minutely"
    assert misfired[0].detail is not None and misfired[0].detail.startswith("3 tick(s) skipped")
    stored = app.list_runs(status="skipped", schedule="minutely")
    assert len(skipped) == 3 == len(stored)
    assert sorted(e.run_id for e in skipped if e.run_id) == sorted(r.id for r in stored)
    assert all(e.run is not None and e.run.status == "skipped" and e.schedule_name == "minutely" for e in skipped)
    rota.testing.run_pending(app)  # nothing new: nothing fires twice
    assert app.events.drain(5)
    assert len([e for e in seen if e.name in ("schedule_misfired", "run_skipped")]) == 4
    app.close()


def test_raising_and_hanging_hooks_do_not_delay_runs(app_factory: Any, caplog: Any) -> None:
    app = app_factory()
    release = threading.Event()
    counted: list[str | None] = []

    @app.on("run_succeeded")
    def raises(event: Event) -> None:
        raise RuntimeError("hook broke")

    @app.on("run_succeeded", timeout=0.2)
    def hangs(event: Event) -> None:
        release.wait(30)

    @app.on("run_succeeded", timeout=0.2)
    async def sleeps(event: Event) -> None:
        await asyncio.sleep(30)

    @app.on("run_succeeded")
    def counts(event: Event) -> None:
        counted.append(event.run_id)

    @app.task(name="quick")
    def quick(i: int) -> int:
        return i

    worker = start_worker(app, concurrency=4)
    wait_for(lambda: worker.state == "running")  # the runs' time, not the worker's start (MySQL, loaded: 1-2 s)
    started = time.monotonic()
    handles = [quick.enqueue(i) for i in range(20)]
    for handle in handles:
        handle.wait(10)
    elapsed = time.monotonic() - started
    assert elapsed < 3.0, f"20 quick runs took {elapsed:.1f} s with slow hooks"
    wait_for(lambda: len(counted) == 20)  # the healthy hook got every event, unhindered
    assert sorted(counted, key=lambda x: int(x or 0)) == [h.id for h in handles]
    # By now the hanging hook holds more abandoned threads than its own pool has: the others
    # must still be served, promptly.
    wait_for(lambda: app.events.timeouts >= 12)
    started = time.monotonic()
    more = [quick.enqueue(i) for i in range(20)]
    for handle in more:
        handle.wait(10)
    wait_for(lambda: len(counted) == 40, timeout=3.0)
    assert time.monotonic() - started < 3.0
    release.set()
    assert app.events.drain(15)
    assert app.events.failures == 40
    assert "hook" in caplog.text and "raised" in caplog.text


def test_a_full_backlog_drops_with_a_counted_warning(tmp_path: Any, caplog: Any) -> None:
    app = make_app(f"sqlite:///{tmp_path}/rota.db")
    app.events.backlog = 1
    release = threading.Event()
    got: list[str] = []

    @app.on("worker_started")
    def slow(event: Event) -> None:
        release.wait(10)
        got.append(event.name)

    for _ in range(5):
        app.events.emit("worker_started", "w1")
    assert app.events.dropped == 4
    assert "dropped worker_started (1 event(s) dropped so far)" in caplog.text
    release.set()
    assert app.events.drain(5)
    assert got == ["worker_started"]
    app.close()


def test_two_workers_fire_each_outcome_once(app_factory: Any) -> None:
    app = app_factory()
    seen = record_all(app)

    @app.task(name="work")
    def work(i: int) -> int:
        time.sleep(0.005)
        return i

    first, second = start_worker(app, concurrency=3), start_worker(app, concurrency=3)
    handles = [work.enqueue(i) for i in range(40)]
    for handle in handles:
        assert handle.wait(20).status == "succeeded"
    first.stop(wait=True, timeout=10)
    second.stop(wait=True, timeout=10)
    assert app.events.drain(5)
    succeeded = Counter(e.run_id for e in seen if e.name == "run_succeeded")
    assert succeeded == Counter({h.id: 1 for h in handles})
    by_run = {e.run_id: e for e in seen if e.name == "run_succeeded"}
    assert all(by_run[h.id].worker_id == app.get_run(h.id).worker for h in handles)
    assert Counter(e.name for e in seen if e.name.startswith("worker_")) == {"worker_started": 2, "worker_stopped": 2}


def test_an_outcome_the_store_contradicts_is_not_delivered(tmp_path: Any) -> None:
    app = make_app(f"sqlite:///{tmp_path}/rota.db")
    seen = record_all(app)

    @app.task(name="t")
    def t() -> None:
        pass

    handle = t.enqueue()  # still pending: a "succeeded" event for it is false
    app.events.emit("run_succeeded", "w1", run_id=int(handle.id))
    app.events.emit("run_retrying", "w1", run_id=int(handle.id))
    assert app.events.drain(5)
    assert [e.name for e in seen] == ["run_retrying"]
    app.close()
