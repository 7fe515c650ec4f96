"""Retention prunes in statements sized to a time target (rota/worker/maintenance.py), so a
prune never holds SQLite's write lock, or final runs' row locks, for long."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import rota
from rota.stores.base import Outcome
from rota.worker.maintenance import FIRST_BATCH, MAX_BATCH, MIN_BATCH, MIN_PAUSE, STATEMENT_TARGET, PruneBatch


def test_a_batch_moves_towards_the_time_target_and_stays_in_bounds() -> None:
    batch = PruneBatch()
    assert batch.size == FIRST_BATCH
    batch.took(FIRST_BATCH, STATEMENT_TARGET / 10)  # ten times faster than the target: at most double
    assert batch.size == 2 * FIRST_BATCH
    for _ in range(20):
        batch.took(batch.size, STATEMENT_TARGET / 10)
    assert batch.size == MAX_BATCH
    batch.took(MAX_BATCH, STATEMENT_TARGET * 100)  # a hundred times too slow: at most a quarter
    assert batch.size == MAX_BATCH // 4
    for _ in range(20):
        batch.took(batch.size, 10.0)
    assert batch.size == MIN_BATCH
    steady = PruneBatch(size=1000)
    steady.took(1000, 2 * STATEMENT_TARGET)  # twice the target: half the rows
    assert steady.size == 500
    steady.took(500, STATEMENT_TARGET)
    assert steady.size == 500
    steady.took(0, 1.0)  # nothing deleted says nothing
    assert steady.size == 500
    assert PruneBatch.pause(0.0) == MIN_PAUSE and PruneBatch.pause(0.1) == pytest.approx(0.3)


def _finished_runs(app: rota.App, n: int) -> None:
    @app.task(name="t")
    def t() -> None: ...

    t.enqueue_many([((), {})] * n)
    while claimed := app.store.claim("w", 500, None, 30):
        app.store.finish([Outcome(c.id, c.token, "succeeded", result="null") for c in claimed])


def _spy(app: rota.App, monkeypatch: pytest.MonkeyPatch, delay: float) -> list[int]:
    sizes: list[int] = []
    prune = app.store.prune

    def spy(status: str, older_than: float, limit: int) -> int:
        sizes.append(limit)
        time.sleep(delay)
        return prune(status, older_than, limit)

    monkeypatch.setattr(app.store, "prune", spy)
    return sizes


def test_every_old_run_goes_in_batches_that_grow_at_most_twofold(
    app_factory: Callable[..., rota.App], clock: rota.FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = app_factory(clock=clock, retention={"succeeded": timedelta(days=1)})
    _finished_runs(app, 1500)
    clock.advance(timedelta(days=2))
    sizes = _spy(app, monkeypatch, 0.0)
    worker = app.worker()
    assert asyncio.run(worker._prune(app.retention)) == 1500
    assert app.store.count_by_status().get("succeeded", 0) == 0 and worker.counters.pruned == 1500
    assert sizes[0] == FIRST_BATCH and all(b <= 2 * a for a, b in itertools.pairwise(sizes))


def test_slow_statements_shrink_the_batch_and_wait_between_them(
    app_factory: Callable[..., rota.App], clock: rota.FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store whose prune takes 20 ms a statement (4x the target): the batch falls by 4x a
    step to the floor, each statement is followed by a pause of three times its length, and
    nothing is left behind."""
    app = app_factory(clock=clock, retention={"succeeded": timedelta(days=1)})
    _finished_runs(app, 300)
    clock.advance(timedelta(days=2))
    sizes = _spy(app, monkeypatch, 0.02)
    pauses: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float, *args: Any) -> Any:
        pauses.append(seconds)
        return await real_sleep(0)

    monkeypatch.setattr("rota.worker.maintenance.asyncio.sleep", sleep)
    assert asyncio.run(app.worker()._prune(app.retention)) == 300
    assert sizes[:3] == [FIRST_BATCH, FIRST_BATCH // 4, MIN_BATCH]
    assert all(p >= 3 * 0.02 for p in pauses)
    assert app.store.count_by_status().get("succeeded", 0) == 0
