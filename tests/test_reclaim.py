"""A worker that claims again a run it still runs (its lease ran out during a pause or a
blocked loop, the run was rescued, and its next claim came before its heartbeat noticed):
the older attempt is lost, stopped and never written; the new one runs in its own slot."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import rota
from rota.stores.base import Claimed

from .conftest import WITH_MYSQL, store_url, wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def test_a_run_claimed_again_while_its_older_attempt_still_runs_supersedes_it(
    app_factory: Callable[..., rota.App], caplog: pytest.LogCaptureFixture
) -> None:
    app = app_factory(lease=120.0)
    gate = threading.Event()
    calls: list[int] = []

    @app.task(name="slow", retries=2)
    def slow() -> str:
        calls.append(1)
        if len(calls) == 1:
            gate.wait(60)
            return "old"
        return "new"

    handle = slow.enqueue()
    # heartbeats a minute apart: the claim comes before the heartbeat would see the loss
    worker = app.worker(install_signal_handlers=False, concurrency=2, heartbeat_interval=60, poll_interval=0.05)
    caplog.set_level(logging.WARNING)
    worker.start()
    try:
        wait_for(lambda: handle.refresh().status == "running", what="the first attempt")
        store: object = app.store
        with store._tx() as s:  # type: ignore[attr-defined]  # what another worker's rescue did
            s.q_text(
                f"UPDATE rota_runs SET status = 'pending', owner = NULL, lease_until = NULL WHERE id = {int(handle.id)}"
            )
        slow.enqueue()  # a wake-up: the worker claims what is due now
        wait_for(lambda: len(calls) >= 2 and handle.refresh().status == "succeeded", what="the new attempt")
        assert handle.refresh().result == "new" and worker.counters.lost == 1
        assert worker.stuck == 1  # the old attempt's thread still runs, stopped, in its own slot
    finally:
        gate.set()
    wait_for(lambda: worker.stuck == 0 and not worker.inflight, what="the old attempt's thread to return")
    assert handle.refresh().result == "new"  # the old result was discarded
    assert worker.free_slots == 2
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]
    worker.stop(wait=True, timeout=10)


def _claim(run_id: int, task: str, token: int, held: bool) -> Claimed:
    now = datetime.now(UTC)
    return Claimed(run_id, task, "[]", "{}", 1, 1, token, None, None, None, now, None if held else now, now)


def _co_app(tmp_path: Path) -> rota.App:
    app = rota.App(f"sqlite:///{tmp_path}/rota.db")

    @app.task(name="co")
    async def co() -> None:
        await asyncio.sleep(30)

    return app


def test_a_superseded_coroutine_frees_its_slot_for_the_new_attempt_only(tmp_path: Path) -> None:
    """The older attempt, a coroutine, frees its slot at once when stopped: the new attempt
    takes it, not a held run started meanwhile (that made 3 in flight at concurrency 2)."""
    app = _co_app(tmp_path)

    async def scenario() -> tuple[list[int], list[int]]:
        worker = app.worker(install_signal_handlers=False, concurrency=2)
        worker._bind_loop()
        executors, claimer = worker._executors, worker._claimer
        executors.submit(_claim(5, "co", 1, False), app.tasks["co"])  # run 5's older attempt

        async def claim(limit: int, start: int) -> list[Claimed]:  # run 5 again, started; two held
            return [_claim(5, "co", 10, False), _claim(8, "co", 11, True), _claim(9, "co", 12, True)]

        claimer._claim = claim  # type: ignore[method-assign]
        claimer.wanted = lambda: 3  # type: ignore[method-assign]
        worker._due.run_due = 0.0
        await claimer.claim_some()
        inflight, held = sorted(executors.inflight), list(worker._prefetch.held)
        for active in list(executors.inflight.values()):
            if active.async_task is not None:
                active.async_task.cancel()
        await asyncio.sleep(0.05)
        return inflight, held

    inflight, held = asyncio.run(scenario())
    assert inflight == [5, 8] and held == [9]  # the new attempt of 5, and one held run in the free slot
    app.close()


def test_a_superseded_attempt_leaves_the_new_attempts_unwritten_start_alone(tmp_path: Path) -> None:
    """The new attempt started from the held runs: its start, not written yet, is its own
    (forgetting the older attempt took it too, so the run finished with no start recorded)."""
    app = _co_app(tmp_path)

    async def scenario() -> dict[int, int]:
        worker = app.worker(install_signal_handlers=False, concurrency=2)
        worker._bind_loop()
        executors = worker._executors
        executors.submit(_claim(5, "co", 1, False), app.tasks["co"])  # run 5's older attempt
        executors.submit(_claim(7, "co", 2, False), app.tasks["co"])
        held = [_claim(5, "co", 10, True), _claim(8, "co", 11, True), _claim(9, "co", 12, True)]
        worker._prefetch.hold_all(held, time.monotonic() + 60)
        worker._finisher.complete(executors.inflight[7], ("ok", "null"))  # run 7 ends: a slot frees
        starts = {run_id: token for run_id, (token, _) in worker._completer.starts.items()}
        inflight = sorted(executors.inflight)
        for active in list(executors.inflight.values()):
            if active.async_task is not None:
                active.async_task.cancel()
        await asyncio.sleep(0.05)
        assert inflight == [5, 8], inflight
        return starts

    assert asyncio.run(scenario()) == {5: 10, 8: 11}
    app.close()
