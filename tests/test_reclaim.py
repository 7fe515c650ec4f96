"""A worker that claims again a run it still runs (its lease ran out during a pause or a
blocked loop, the run was rescued, and its next claim came before its heartbeat noticed):
the older attempt is lost, stopped and never written; the new one runs in its own slot."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest

import rota

from .conftest import wait_for


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
            gate.wait(20)
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
