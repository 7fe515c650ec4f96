"""Two instances making the same tick (issue 42 item 4): the one that loses neither waits
on the winner's rows nor locks them. On MySQL/MariaDB the tick's transaction takes the
schedule's row first, without waiting (SKIP LOCKED): a row moved on since it was read ends
the pass at once; a row held by another transaction is tried again for at most about 0.13 s
(a finish of the schedule's run holds it too: test_tick_meets_finish), locking nothing. Before, the loser's insert of the same
tick waited for the winner's commit and then held the winner's run row (a duplicate key is
locked) until its own rollback: a worker claiming that run ahead of its tick (SKIP LOCKED)
skipped it, and the tick started only at a claim at its due time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import rota
from rota.errors import DatabaseTransient
from rota.stores.base import Claimed

from .conftest import WITH_MYSQL, store_url

TICK = datetime(2030, 1, 1, 0, 1, tzinfo=UTC)
LEAD = 0.3


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    yield from store_url(request, tmp_path)


@pytest.fixture
def fake() -> rota.FakeClock:
    return rota.FakeClock(TICK - timedelta(seconds=30))


def _apps(app_factory: Callable[..., rota.App], fake: rota.FakeClock, **options: Any) -> tuple[rota.App, rota.App]:
    """Two instances (each its own store and connections) with a schedule due at TICK."""
    first, second = app_factory(clock=fake), app_factory(clock=fake)
    for app in (first, second):
        app.task(name="t")(lambda: None)
    if first.store.dialect == "sqlite":
        pytest.skip("SQLite: one writer at a time, no row locks (a tick maker waits for the whole database)")
    first.add_schedule("s", "t", every=60, **options)
    fake.set(TICK - timedelta(seconds=0.2))  # within the lead
    return first, second


def _plan(app: rota.App) -> tuple[Any, Any]:
    """What a ticker read and planned (the due schedule as both instances read it)."""
    due = app.store.due_schedules(10, LEAD)[0]
    worker = app.worker(install_signal_handlers=False)
    try:
        plan = worker._ticker._plan(due, app.store.now(), LEAD)
    finally:
        worker._threads.close()
        worker._db_pool.close()
    assert not isinstance(plan, str) and plan.ahead == TICK
    return due, plan


@contextmanager
def _before_its_end(app: rota.App, action: Callable[[], Any]) -> Iterator[list[Any]]:
    """`app`'s transactions run `action` just before they end (commit or rollback), while
    they still hold their locks; its results are collected."""
    seen: list[Any] = []
    store: Any = app.store
    original = store._tx

    @contextmanager
    def tx() -> Iterator[Any]:
        with original() as s:
            try:
                yield s
            finally:
                seen.append(action())

    store._tx = tx
    try:
        yield seen
    finally:
        store._tx = original


@pytest.mark.parametrize("overlap", ["concurrent", "skip"])
def test_the_instance_that_loses_a_tick_leaves_its_run_claimable_ahead(
    app_factory: Callable[..., rota.App], fake: rota.FakeClock, overlap: str
) -> None:
    winner, loser = _apps(app_factory, fake, overlap=overlap)
    due, plan = _plan(winner)
    _, late_plan = _plan(winner)  # the loser read the same row before the winner wrote
    assert winner.store.materialize(due, plan)
    claims: list[Claimed] = []

    def claim_ahead() -> None:
        claims.extend(winner.store.claim_ahead("w", 5, None, 30.0, 0.5))

    with _before_its_end(loser, claim_ahead):
        assert not loser.store.materialize(due, late_plan)  # another instance made this tick
    assert [c.scheduled_for for c in claims] == [TICK]  # not skipped as locked by the loser
    assert [r.scheduled_for for r in winner.list_runs(schedule="s")] == [TICK]


def test_a_tick_maker_does_not_wait_for_another_instance_making_the_same_tick(
    app_factory: Callable[..., rota.App], fake: rota.FakeClock
) -> None:
    first, second = _apps(app_factory, fake)
    if first.store.dialect != "mysql":
        pytest.skip("MySQL/MariaDB only: PostgreSQL's tick maker waits for the other's commit (lock_timeout)")
    due, plan = _plan(first)
    _, other = _plan(first)
    took: list[float] = []

    def meanwhile() -> None:
        began = time.monotonic()
        try:
            took.append(second.store.materialize(due, other))
        except DatabaseTransient as exc:  # (before: the lock wait timed out, four times)
            took.append(exc)
        took.append(time.monotonic() - began)

    with _before_its_end(first, meanwhile):  # the other instance makes the tick while this one writes it
        assert first.store.materialize(due, plan)
    made, seconds = took[0], took[1]
    assert made is False and seconds < 0.5, took  # tried ~0.13 s; before: a lock wait timeout (1 s), 4 times
    assert [r.scheduled_for for r in first.list_runs(schedule="s")] == [TICK]
