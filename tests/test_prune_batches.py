"""Retention prunes in statements sized to a time target (rota/worker/maintenance.py), so a
prune never holds SQLite's write lock, or final runs' row locks, for long."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

import rota
from rota.stores.base import Outcome
from rota.worker import maintenance
from rota.worker.maintenance import (
    FIRST_BATCH,
    MAX_BATCH,
    MIN_BATCH,
    MIN_PAUSE,
    SQLITE_STATEMENT_TARGET,
    STATEMENT_TARGET,
    PruneBatch,
)

from .conftest import WITH_MYSQL, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


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
    steady = PruneBatch(size=1000, fastest=0.0)  # no fixed cost: the time is the rows'
    steady.took(1000, 2 * STATEMENT_TARGET)  # twice the target: half the rows
    assert steady.size == 500
    steady.took(500, STATEMENT_TARGET)
    assert steady.size == 500
    steady.took(0, 1.0)  # nothing deleted says nothing
    assert steady.size == 500
    assert PruneBatch.pause(0.0) == MIN_PAUSE and PruneBatch.pause(0.1) == pytest.approx(0.3)


def _simulate(fixed: float, per_row: float, steps: int = 30) -> PruneBatch:
    batch = PruneBatch()
    for _ in range(steps):
        batch.took(batch.size, fixed + per_row * batch.size)
    return batch


def test_a_fixed_cost_above_the_target_does_not_starve_the_batch() -> None:
    """PostgreSQL: the commit, the round trip and the delete trigger cost the same for 20 runs
    as for 5,000. Such a statement grows the batch, it does not shrink it to the floor."""
    assert _simulate(fixed=0.006, per_row=1e-6).size == MAX_BATCH
    assert _simulate(fixed=0.020, per_row=0.0).size == MAX_BATCH


def test_the_rows_part_of_a_statement_settles_near_the_target() -> None:
    """SQLite: the time is the rows' (25 µs each here); the batch settles where the rows take
    about the target beyond the first, smallest statement."""
    batch = _simulate(fixed=0.0, per_row=25e-6)
    first = FIRST_BATCH * 25e-6
    assert batch.size == pytest.approx((first + STATEMENT_TARGET) / 25e-6, rel=0.1)
    assert batch.size * 25e-6 <= 2 * STATEMENT_TARGET


def _finished_runs(app: rota.App, n: int) -> None:
    if "t" not in app.tasks:

        @app.task(name="t")
        def t() -> None: ...

    app.tasks["t"].enqueue_many([((), {})] * n)
    while claimed := app.store.claim("w", 500, None, 30):
        app.store.finish([Outcome(c.id, c.token, "succeeded", result="null") for c in claimed])


def _old_runs(app_factory: Callable[..., rota.App], clock: rota.FakeClock, n: int) -> rota.App:
    """An app keeping succeeded runs a day, with `n` of them finished two days ago."""
    app = app_factory(clock=clock, retention={"succeeded": timedelta(days=1)})
    _finished_runs(app, n)
    clock.advance(timedelta(days=2))
    return app


def _spy(app: rota.App, monkeypatch: pytest.MonkeyPatch, per_run: float = 0.0) -> list[tuple[int, float]]:
    """Record each prune statement's (limit, after); make it take `per_run` seconds a run."""
    calls: list[tuple[int, float]] = []
    prune = app.store.prune_from

    def spy(status: str, older_than: float, limit: int, after: float) -> tuple[int, float]:
        calls.append((limit, after))
        time.sleep(per_run * limit)
        return prune(status, older_than, limit, after)

    monkeypatch.setattr(app.store, "prune_from", spy)
    return calls


def test_every_old_run_goes_in_batches_that_grow_at_most_twofold(
    app_factory: Callable[..., rota.App], clock: rota.FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = _old_runs(app_factory, clock, 1500)
    calls = _spy(app, monkeypatch)
    worker = app.worker()
    assert asyncio.run(worker._prune(app.retention)) == 1500
    sizes = [limit for limit, _ in calls]
    assert app.store.count_by_status().get("succeeded", 0) == 0 and worker.counters.pruned == 1500
    assert sizes[0] == FIRST_BATCH and all(b <= 2 * a for a, b in itertools.pairwise(sizes))


def test_statements_slower_per_run_get_smaller_and_are_followed_by_pauses(
    app_factory: Callable[..., rota.App], clock: rota.FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store whose prune takes 1 ms a run: the batch stays far below the fast store's, each
    statement is followed by a pause of three times its length, and nothing is left behind."""
    app = _old_runs(app_factory, clock, 300)
    calls = _spy(app, monkeypatch, per_run=0.001)
    pauses: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float, *args: Any) -> Any:
        pauses.append(seconds)
        return await real_sleep(0)

    monkeypatch.setattr("rota.worker.maintenance.asyncio.sleep", sleep)
    assert asyncio.run(app.worker()._prune(app.retention)) == 300
    sizes = [limit for limit, _ in calls]
    assert sizes[0] == FIRST_BATCH and max(sizes) < MAX_BATCH
    assert pauses and all(p >= 3 * 0.001 * FIRST_BATCH for p in pauses)
    assert app.store.count_by_status().get("succeeded", 0) == 0


def test_sqlite_prune_statements_aim_shorter_than_postgresql_ones(
    app_factory: Callable[..., rota.App], clock: rota.FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On SQLite every prune statement holds the one write lock that claims and finishes
    need: its batches aim at a shorter time than on PostgreSQL (row locks on final runs)."""
    app = _old_runs(app_factory, clock, 50)
    targets: list[float] = []
    real = maintenance.PruneBatch

    def made(**kwargs: Any) -> PruneBatch:
        targets.append(kwargs["target"])
        return real(**kwargs)

    monkeypatch.setattr(maintenance, "PruneBatch", made)
    assert asyncio.run(app.worker()._prune(app.retention)) == 50
    sqlite = app.database_url.startswith("sqlite")
    assert targets == [SQLITE_STATEMENT_TARGET if sqlite else STATEMENT_TARGET]
    assert SQLITE_STATEMENT_TARGET < STATEMENT_TARGET


def test_a_pass_stops_when_its_share_is_spent_and_counts_what_it_deleted(
    app_factory: Callable[..., rota.App], clock: rota.FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = _old_runs(app_factory, clock, 200)
    monkeypatch.setattr("rota.worker.maintenance.PASS_SECONDS", 0.0)
    worker = app.worker()
    assert asyncio.run(worker._prune(app.retention)) == FIRST_BATCH  # one statement, then the next pass
    assert app.store.count_by_status()["succeeded"] == 200 - FIRST_BATCH

    calls = 0
    prune = app.store.prune_from

    def failing(status: str, older_than: float, limit: int, after: float) -> tuple[int, float]:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise rota.DatabaseTransient("database is locked")
        return prune(status, older_than, limit, after)

    monkeypatch.setattr("rota.worker.maintenance.PASS_SECONDS", 40.0)
    monkeypatch.setattr(app.store, "prune_from", failing)
    with pytest.raises(rota.DatabaseTransient):
        asyncio.run(worker._prune(app.retention))
    assert worker.counters.pruned == FIRST_BATCH + FIRST_BATCH + 2 * FIRST_BATCH  # kept across the error
    assert app.store.lock_acquire("rota:prune", "other", 5.0) is not None  # released


def test_the_time_a_status_does_not_need_goes_to_the_others(
    app_factory: Callable[..., rota.App], clock: rota.FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention for succeeded and failed runs, only succeeded ones old: succeeded's half of
    the pass runs out, failed needs one statement, and succeeded gets the rest of the pass,
    going on from where it stopped (its finish-time cursor), instead of waiting for the next
    pass (five minutes by default)."""
    app = app_factory(clock=clock, retention={"succeeded": timedelta(days=1), "failed": timedelta(days=1)})
    _finished_runs(app, 600)
    clock.advance(timedelta(days=2))
    # 1.2 s: enough for a second round after the failed status's statement on a loaded machine
    monkeypatch.setattr("rota.worker.maintenance.PASS_SECONDS", 1.2)
    calls: list[tuple[str, float, float]] = []  # status, cursor given, cursor returned
    spans: list[tuple[float, float]] = []  # each statement's start and end
    prune = app.store.prune_from

    def slow(status: str, older_than: float, limit: int, after: float) -> tuple[int, float]:
        began = time.monotonic()
        time.sleep(0.001 * limit)  # 1 ms a run: 600 runs take far more than the pass
        n, cursor = prune(status, older_than, limit, after)
        calls.append((status, after, cursor))
        spans.append((began, time.monotonic()))
        return n, cursor

    monkeypatch.setattr(app.store, "prune_from", slow)
    started = time.monotonic()
    pruned = asyncio.run(app.worker()._prune(app.retention))
    statuses = [status for status, _, _ in calls]
    first_failed = statuses.index("failed")
    assert statuses[0] == "succeeded" and "succeeded" in statuses[first_failed + 1 :], statuses
    assert statuses.count("failed") == 1  # nothing to prune: done, not asked again
    assert calls[first_failed + 1][1] == calls[first_failed - 1][2] > 0.0  # goes on from where it stopped
    assert 0 < pruned < 600 and time.monotonic() - started < 1.2 + 1.0
    # every statement waited for the pause (3x) of the one before, across statuses and rounds
    for (a0, a1), (b0, _) in itertools.pairwise(spans):
        assert b0 - a1 >= 3 * (a1 - a0) * 0.99, spans


def test_each_statement_goes_on_from_the_last_finish_time_the_one_before_deleted(
    app_factory: Callable[..., rota.App], clock: rota.FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL the runs a pass deleted leave dead index entries until VACUUM: a pass whose
    every statement started from the oldest run walked them again and again (570 runs/s at
    10,000,000 runs). Runs go oldest finish first, each statement from where the last ended."""
    app = app_factory(clock=clock, retention={"succeeded": timedelta(days=1)})
    finished: list[float] = []
    for _ in range(5):  # five groups of 100, finished a second apart
        _finished_runs(app, 100)
        finished.append(clock.now().timestamp())
        clock.advance(timedelta(seconds=1))
    clock.advance(timedelta(days=2))
    store = app.store
    n, after = store.prune_from("succeeded", 3600, 150, finished[2])  # from the third group on
    assert n == 150 and after == pytest.approx(finished[3], abs=1e-3)
    assert {r.finished_at.timestamp() for r in app.list_runs(limit=1000) if r.finished_at} >= {finished[0], finished[1]}
    assert store.prune_from("succeeded", 3600, 10, finished[-1] + 1) == (0, finished[-1] + 1)  # none after
    calls = _spy(app, monkeypatch)
    assert asyncio.run(app.worker()._prune(app.retention)) == 350
    afters = [after for _, after in calls]
    assert afters[0] == 0 and afters == sorted(afters) and afters[-1] > finished[0]  # always further on
    assert store.count_by_status().get("succeeded", 0) == 0
