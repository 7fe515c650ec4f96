"""Smaller promises of issue 18, each on every store where it applies: the stuck count
without a heartbeat's lag, a SQLite file the worker cannot open refused at start, a SQLite
lease taken by another process noticed, a client read retried once across a cut."""

from __future__ import annotations

import threading
from collections.abc import Callable

import rota

from .conftest import start_worker
from .procs import wait_until


def test_the_stuck_count_does_not_lag_by_a_heartbeat(app_factory: Callable[..., rota.App]) -> None:
    """A thread past its timeout is stuck: app.stats() (this process's worker) and another
    client (the registry) show it, and its end, long before the next heartbeat (10 s)."""
    app = app_factory(lease=30.0)
    other = app_factory(lease=30.0)
    release = threading.Event()

    @app.task(name="hang", timeout=0.2)
    def hang() -> None:
        release.wait(30)

    worker = start_worker(app, concurrency=2)
    wait_until(lambda: app.stats()["workers"] == 1, 10, "the worker to register")
    hang.enqueue()
    wait_until(lambda: worker.stuck == 1, 10, "the handler to time out")
    wait_until(lambda: app.stats()["stuck"] == 1, 2, "app.stats() to show it")
    wait_until(lambda: other.stats()["stuck"] == 1, 2, "another client to see it in the registry")
    release.set()
    wait_until(lambda: worker.stuck == 0, 10, "the thread to return")
    wait_until(lambda: app.stats()["stuck"] == 0 and other.stats()["stuck"] == 0, 2, "both to show its end")
