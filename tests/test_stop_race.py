"""A handler that returns while a stopping worker settles the runs it kept (found by the soak,
seed 13 on SQLite: `--fault-every 1.5 --workers 4 --shutdown-timeout 0.3 --lease 2`).

After the drain, the stop looks at the runs whose handlers still ran twice: once to hand back
those that had ended since, once (after that write) to keep or fence the rest. A handler that
returned between the two looks was in neither list: its run stayed `running` under the
stopped worker, its lease no longer renewed nor fenced, and was rescued a lease later as a
lost worker's (`WorkerLost`, an attempt counted; with no attempt left, failed). It is now
decided from one look: kept (and so handed back by the keeper once its handler returned, or
fenced with `WorkerStopped` by `rota worker`)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import rota
from rota.worker import shutdown

from .conftest import start_worker, wait_for


def test_a_handler_returning_between_the_stops_two_looks_is_still_handed_back(
    app: rota.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    started, release = threading.Event(), threading.Event()

    @app.task(name="late")
    def late() -> None:
        started.set()
        release.wait(30)

    real, after_stop = shutdown.still_running, shutdown.Lifecycle._after_stop
    settling = threading.Event()

    async def marked(self: Any, kept: list[Any]) -> None:
        settling.set()
        await after_stop(self, kept)

    def racing(active: Any) -> bool:
        running = real(active)
        if running and settling.is_set() and not release.is_set():  # its first look after the drain
            release.set()  # the handler returns now, before the next look
            deadline = time.monotonic() + 10
            while real(active) and time.monotonic() < deadline:
                time.sleep(0.01)
        return running

    monkeypatch.setattr(shutdown, "still_running", racing)
    monkeypatch.setattr(shutdown.Lifecycle, "_after_stop", marked)
    worker = start_worker(app, shutdown_timeout=0.3, lease=30.0)  # a long lease: no rescue within the test
    handle = late.enqueue()
    assert started.wait(10)
    assert worker.stop(wait=True, timeout=10)
    assert release.is_set()  # the race was provoked
    wait_for(lambda: handle.refresh().status == "pending", 10, "the run to be handed back")
    run = handle.refresh()
    assert run.attempt == 0 and run.history[-1]["status"] == "handed back", run
