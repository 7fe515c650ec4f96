"""Claiming ahead (Store.claim_ahead, Claimer.claim_ahead), on both stores: an idle worker
claims, held, the runs due within CLAIM_AHEAD just before their time and starts each at its
due time on its own clock, so a tick's start does not wait for the claim's round trip.

The store's side: only runs due within the window, held (no attempt counted, no start time
even for a retry), never a limited, rated, queued or cancel-requested run. The worker's: a
run claimed ahead never starts before its due time; cancelled or at shutdown while held it
never starts and costs no attempt."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import rota
from rota.stores.base import Outcome

from .conftest import WITH_MYSQL, start_worker, store_url, wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


T0 = datetime(2030, 1, 1, tzinfo=UTC)


def test_the_store_claims_ahead_only_plain_runs_due_within_the_window_and_holds_them(
    app_factory: Callable[..., rota.App],
) -> None:
    clock = rota.FakeClock(T0)
    app = app_factory(clock=clock)
    task = app.task(name="t", retries=2)(lambda n=0: n)
    limited = app.task(name="limited", limit=1)(lambda: None)
    app.migrate()
    app.prepare()
    soon = task.options(delay=0.01, priority=1).enqueue(1)
    sooner = task.options(delay=0.005).enqueue(2)
    task.options(delay=5).enqueue(3)  # beyond the window
    task.options(delay=0.01, queue="other").enqueue(4)
    limited.options(delay=0.01).enqueue()
    cancelled = task.options(delay=0.01).enqueue(5)
    app.cancel(cancelled.id)
    claimed = app.store.claim_ahead("w", 10, ["default"], 30.0, 0.02)
    assert [c.id for c in sorted(claimed, key=lambda c: (-c.priority, c.due))] == [int(soon.id), int(sooner.id)]
    assert all(c.held and c.attempt == 0 and c.started_at is None for c in claimed)
    assert app.store.claim("w2", 10, None, 30.0) == []  # held by w: nobody else takes them
    run = app.get_run(soon.id)
    assert (run.status, run.held, run.attempt, run.worker) == ("running", True, 0, "w")


def test_a_retry_claimed_ahead_shows_no_start_until_it_starts(app_factory: Callable[..., rota.App]) -> None:
    clock = rota.FakeClock(T0)
    app = app_factory(clock=clock)
    task = app.task(name="t", retries=2)(lambda: None)
    app.migrate()
    run_id = int(task.enqueue().id)
    (c,) = app.store.claim("w", 1, None, 30.0)
    retry = Outcome(run_id, c.token, "pending", error=json.dumps({"type": "E"}), retry_in=0.01)
    assert app.store.finish([retry]) == {run_id}
    (again,) = app.store.claim_ahead("w", 1, None, 30.0, 0.02)
    assert again.held and again.started_at is None and again.attempt == 1
    run = app.get_run(str(run_id))
    assert run.held and run.started_at is None  # not the first attempt's start
    assert app.store.start([(run_id, again.token, 0.0)]) == {run_id}
    assert app.get_run(str(run_id)).attempt == 2


def _stamped(app: rota.App) -> Any:
    return app.task(name="stamp", pass_context=True)(lambda ctx: time.time() - ctx.scheduled_for.timestamp())


def test_a_run_claimed_ahead_starts_at_its_due_time_not_before_nor_at_the_next_poll(
    app_factory: Callable[..., rota.App],
) -> None:
    app = app_factory()
    stamp = _stamped(app)
    worker = start_worker(app, poll_interval=5.0)
    # wide enough for a loaded machine (0.1, MySQL's own lead, under load 10: a loop 0.1 s late
    # claimed 6 of 8 runs when due, on time but not ahead)
    worker._due.claim_ahead = 0.2  # type: ignore[attr-defined]
    time.sleep(0.3)  # idle
    refs = [stamp.options(delay=0.3 + 0.25 * i).enqueue() for i in range(8)]
    late = [ref.wait(15).result for ref in refs]
    assert all(x >= -0.0005 for x in late), f"started before its due time: {late}"
    # not left held until something else woke the worker (its next poll is 5 s away)
    assert all(x < 1.0 for x in late), f"started late: {late}"
    assert worker.counters.claimed_ahead == 8


def test_a_run_cancelled_while_claimed_ahead_never_starts(app_factory: Callable[..., rota.App]) -> None:
    app = app_factory()
    stamp = _stamped(app)
    worker = start_worker(app, poll_interval=5.0)
    worker._due.claim_ahead = 3.0  # type: ignore[attr-defined]  # a window long enough to act in
    time.sleep(0.3)
    ref = stamp.options(delay=2.0).enqueue()
    wait_for(lambda: app.get_run(ref.id).held, 5, "the run claimed ahead")
    app.cancel(ref.id)
    run = ref.wait(10)
    assert (run.status, run.attempt, run.started_at) == ("cancelled", 0, None)


def test_a_worker_stopping_hands_back_what_it_claimed_ahead(app_factory: Callable[..., rota.App]) -> None:
    app = app_factory()
    stamp = _stamped(app)
    worker = start_worker(app, poll_interval=5.0)
    worker._due.claim_ahead = 3.0  # type: ignore[attr-defined]
    time.sleep(0.3)
    ref = stamp.options(delay=2.0).enqueue()
    wait_for(lambda: app.get_run(ref.id).held, 5, "the run claimed ahead")
    worker.stop(wait=True, timeout=10)
    run = app.get_run(ref.id)
    assert (run.status, run.attempt, run.started_at, run.due_at > datetime.now(UTC) + timedelta(seconds=0.5)) == (
        "pending",
        0,
        None,
        True,
    )


def test_a_stopping_worker_hands_back_its_held_runs_before_the_drain_not_after(
    app_factory: Callable[..., rota.App],
) -> None:
    app = app_factory()
    # ignores cancellation: drained (4 s: still running after the steps below on a loaded machine)
    slow = app.task(name="slow")(lambda: time.sleep(4.0))
    stamp = _stamped(app)
    worker = start_worker(app, poll_interval=5.0, concurrency=2, shutdown_timeout=10.0)
    worker._due.claim_ahead = 3.0  # type: ignore[attr-defined]
    busy = slow.enqueue()
    wait_for(lambda: app.get_run(busy.id).status == "running", 5, "the slow run")
    held = stamp.options(delay=2.5).enqueue()
    wait_for(lambda: app.get_run(held.id).held, 5, "the run claimed ahead")
    worker.stop(wait=False)
    wait_for(lambda: app.get_run(held.id).status == "pending", 1.0, "the held run handed back during the drain")
    assert app.get_run(busy.id).status == "running"  # still draining
    wait_for(lambda: worker.state == "stopped", 10, "the drain")  # (a second stop() would skip it)
    assert app.get_run(busy.id).status == "succeeded"


def test_a_rescued_run_claimed_ahead_keeps_its_due_time_and_a_queued_run_is_not_claimed_ahead(
    app_factory: Callable[..., rota.App],
) -> None:
    clock = rota.FakeClock(T0)
    app = app_factory(clock=clock)
    task = app.task(name="t")(lambda: None)
    app.migrate()
    app.add_schedule("q", "t", every=3600, overlap="queue")
    active, queued = app.trigger("q"), app.trigger("q")
    later = task.options(delay=60).enqueue()
    claimed = {c.id for c in app.store.claim_ahead("w", 10, None, 30.0, 120.0)}
    assert claimed == {int(active.id), int(later.id)}  # not the queued tick
    clock.advance(31)  # the lease ran out (the worker was killed), the run still due in 29 s
    app.store.rescue()
    run = app.get_run(later.id)
    assert (run.status, run.attempt, run.due_at) == ("pending", 0, T0 + timedelta(seconds=60))
    assert app.get_run(queued.id).queued
