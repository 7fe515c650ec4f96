"""A tick pass that meets a finish of one of the schedule's own runs (review of issue 42).

The finish updates the schedule's row (its counters: MySQL's rota_run_finished trigger), so
it holds that row's lock for its transaction's few milliseconds. On MySQL/MariaDB the tick
maker takes that row without waiting (SKIP LOCKED, so that an instance losing the tick to
another waits for nothing): before, a pass that met the finish was locked out, and a tick
due at that moment was made only at the next poll. Now a row still as the ticker read it but
locked is tried again for a moment, and the tick is made once the finish commits. On
PostgreSQL and SQLite the tick maker waits for the finish's commit (a row lock, the writers'
lock): the same contract holds there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import rota
from rota.stores.records import Outcome

from .conftest import WITH_MYSQL, store_url
from .test_ticks_contention import _before_its_end

TICK = datetime(2030, 1, 1, 0, 1, tzinfo=UTC)
BOUND = 0.5  # s: well under a poll (1 s by default), well over the finish's hold below
HOLD = 0.02  # s the finish keeps the schedule's row after the tick pass met it


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    yield from store_url(request, tmp_path)


@pytest.mark.parametrize("overlap", ["skip", "concurrent"])
def test_a_tick_that_meets_a_finish_of_the_schedules_run_is_made_once_it_commits(
    app_factory: Callable[..., rota.App], overlap: str
) -> None:
    fake = rota.FakeClock(TICK - timedelta(seconds=30))
    finisher, ticker = app_factory(clock=fake), app_factory(clock=fake)
    if finisher.store.dialect == "postgresql":
        pytest.skip(
            "PostgreSQL: a finish is one autocommitted statement (no moment inside it to hold); "
            "the tick maker waits for a held schedule row there anyway (tick_lock_timeout)"
        )
    for app in (finisher, ticker):
        app.task(name="t")(lambda: None)
    finisher.add_schedule("s", "t", every=60, overlap=overlap)
    finisher.trigger("s")  # the previous run, running as its next tick comes
    [claimed] = finisher.store.claim("w", 1, None, 30.0)
    fake.set(TICK)
    [due] = ticker.store.due_schedules(10)
    worker = ticker.worker(install_signal_handlers=False)
    try:
        plan = worker._ticker._plan(due, ticker.store.now())
    finally:
        worker._threads.close()
        worker._db_pool.close()
    assert not isinstance(plan, str) and list(plan.run) == [TICK]
    took: list[Any] = []

    def tick_pass() -> None:
        began = time.monotonic()
        took.append(ticker.store.materialize(due, plan))
        took.append(time.monotonic() - began)

    passing = threading.Thread(target=tick_pass)

    def meanwhile() -> None:  # the finish holds the schedule's row: the tick pass meets it
        passing.start()
        time.sleep(HOLD)

    with _before_its_end(finisher, meanwhile):
        assert finisher.store.finish([Outcome(claimed.id, claimed.token, "succeeded", result="null")])
    passing.join(10)
    assert took and took[0] is True, took  # before (MySQL): locked out, the tick left to the next poll
    assert took[1] < BOUND, took
    runs = {r.scheduled_for: r.status for r in ticker.list_runs(schedule="s")}
    assert runs.get(TICK) == "pending", runs  # the tick runs: its previous run had ended
