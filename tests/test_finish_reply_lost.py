"""An outcome whose write committed but whose reply was lost (the connection cut after the
commit: found in the soak's worker logs under proxy cuts on PostgreSQL). The worker writes the
outcome again, finds the run no longer running, and took it for a stale write: "outcome
'succeeded' discarded ... its lease was lost", the stale-write counter up, and the run's
`run_succeeded` event never emitted. It now reads the run's row back: holding this outcome
under its token, it was written (the event is emitted, nothing is said discarded)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

import rota
from rota.errors import DatabaseUnavailable

from .conftest import start_worker, wait_for


def test_an_outcome_whose_commit_reply_was_lost_is_written_once_with_its_event(
    app_factory: Callable[..., rota.App], caplog: pytest.LogCaptureFixture
) -> None:
    app = app_factory(lease=10.0)
    heard: list[str] = []

    @app.task(name="once", retries=2)
    def once(n: int) -> int:
        return n

    @app.on("run_succeeded")
    def succeeded(event: rota.Event) -> None:
        heard.append(str(event.run_id))

    store: Any = app.store
    cut = threading.Event()

    def lose_reply(real: Callable[..., Any], outcomes: Any) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            got = real(*args, **kwargs)
            if outcomes(args) and not cut.is_set():
                cut.set()
                raise DatabaseUnavailable("injected: the finish committed, its reply was lost")
            return got

        return call

    store.finish = lose_reply(store.finish, lambda args: bool(args[0]))
    store.finish_and_claim = lose_reply(store.finish_and_claim, lambda args: bool(args[0]))
    caplog.set_level(logging.WARNING, logger="rota.worker")
    handle = once.enqueue(7)
    worker = start_worker(app, concurrency=1, poll_interval=0.05)
    wait_for(lambda: handle.refresh().status == "succeeded", 20, "the run to succeed")
    wait_for(lambda: heard == [handle.id], 10, "its run_succeeded event")
    assert cut.is_set()
    run = handle.refresh()
    assert run.attempt == 1 and run.result == 7 and run.history == [], run
    assert not [r for r in caplog.records if "discarded" in r.getMessage()], caplog.text
    assert worker.counters.stale_writes == 0
