"""A claim whose reply never reached its worker (the connection cut after the commit): the
worker gives that claim's runs back as they were when it reaches the database again
(`Store.disown`), so none is rescued later as a live worker's loss with an attempt (and a
rate's start) counted for a handler that never ran. Contract tests on both stores; the
PostgreSQL connection cut itself is in tests/faults/test_scenarios_outage.py."""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import rota
from rota.errors import DatabaseUnavailable

from .conftest import WITH_MYSQL, make_app, start_worker, store_url, wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


T0 = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture
def clocked(db_url: str) -> Any:
    clock = rota.FakeClock(T0)
    app = make_app(db_url, clock=clock)

    @app.task(name="plain", retries=3)
    def plain(n: int) -> None: ...

    @app.task(rate=rota.Rate(2, per=timedelta(seconds=10), by="account"), name="call", retries=3)
    def call(account: str, n: int = 0) -> None: ...

    app.migrate()
    app.prepare()
    yield app, plain, call, clock
    app.close()


def test_disown_gives_back_the_runs_the_worker_does_not_know_it_holds(clocked: Any) -> None:
    app, plain, _, clock = clocked
    plain.enqueue(0)
    (expired,) = app.store.claim("w", 1, None, 1.0, 1)
    clock.advance(2)  # its lease ran out: the rescue's to judge, never disown's
    for n in range(1, 5):
        plain.enqueue(n)
    kept, started, held = app.store.claim("w", 3, None, 30.0, 2)  # the first two start, one held
    (theirs,) = app.store.claim("v", 1, None, 30.0, 1)  # another worker's
    assert not started.held and held.held
    app.cancel(held.id)  # a cancellation requested meanwhile: it ends cancelled
    back = app.store.disown("w", [kept.token])  # the worker knows only `kept`
    assert sorted(back) == sorted([(started.id, "pending"), (held.id, "cancelled")])
    given = app.get_run(started.id)
    assert given.status == "pending" and given.attempt == 0 and given.started_at is None
    assert given.history == [] and given.error is None  # no handler ran: nothing to record
    assert app.get_run(held.id).attempt == 0
    for untouched in (kept, theirs, expired):
        run = app.get_run(untouched.id)
        assert run.status == "running" and run.attempt == 1, run
    assert app.store.disown("w", [kept.token]) == []
    (again,) = app.store.claim("v", 5, None, 30.0, 5)  # due as it was: claimed like any due run
    assert again.id == started.id and again.attempt == 1


def test_disown_takes_a_rated_runs_start_out_of_its_window(clocked: Any) -> None:
    app, _, call, _ = clocked
    for n in range(3):
        call.enqueue("acme", n)
    first = app.store.claim("w", 100, None, 30.0)  # two starts: the window is full
    assert len(first) == 2 and _started_in_window(app, "call") == 2
    assert app.store.claim("w", 100, None, 30.0) == []
    assert sorted(app.store.disown("w", [])) == sorted((c.id, "pending") for c in first)
    assert _started_in_window(app, "call") == 0
    assert all(app.get_run(c.id).attempt == 0 for c in first)
    assert len(app.store.claim("w", 100, None, 30.0)) == 2  # their room is theirs again


def _started_in_window(app: rota.App, name: str) -> int:
    (info,) = [r for r in app.store.list_rates() if r.name == name]  # type: ignore[attr-defined]
    return int(info.started)


def test_a_worker_whose_claim_reply_was_lost_gives_the_runs_back_and_runs_each_once(
    app_factory: Callable[..., rota.App], caplog: pytest.LogCaptureFixture
) -> None:
    """The first claim commits, then raises as a cut connection does: the worker gives its
    runs back at its next pass and claims them again. Each run succeeds with one attempt,
    its handler's one start; none is rescued as lost from this live worker."""
    app = app_factory(lease=5.0)
    lock = threading.Lock()
    starts: collections.Counter[str] = collections.Counter()

    @app.task(name="count", pass_context=True, retries=3)
    def count(ctx: rota.RunContext, n: int) -> int:
        with lock:
            starts[str(ctx.run_id)] += 1
        return n

    store: Any = app.store
    real, lost = store.claim, []

    def claim(*args: Any, **kwargs: Any) -> Any:
        got = real(*args, **kwargs)
        if got and not lost:
            lost.extend(got)
            raise DatabaseUnavailable("injected: the claim committed, its reply was lost")
        return got

    store.claim = claim
    caplog.set_level(logging.WARNING, logger="rota.worker")
    handles = [count.enqueue(n) for n in range(6)]
    start_worker(app, concurrency=4, poll_interval=0.05)
    wait_for(lambda: all(h.refresh().status == "succeeded" for h in handles), 30, "every run to succeed")
    assert lost
    for h in handles:
        run = h.refresh()
        assert run.attempt == starts[run.id] == 1 and run.history == [], run
    assert any(getattr(r, "event", None) == "claim_reply_lost" for r in caplog.records)
