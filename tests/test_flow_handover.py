"""The exclusive slot's hand-over on both stores: backfilled (queued) ticks run one after
another, each started within a wake-up of the end of the one before (not at the next poll),
by a real worker thread with a long poll interval."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

import rota

from .conftest import start_worker


def test_backfilled_ticks_of_an_exclusive_schedule_start_one_after_another_without_polling(
    app_factory: Callable[..., rota.App],
) -> None:
    app = app_factory(poll_interval=30.0)  # a poll would take 30 s: only wake-ups can pass

    @app.task(name="job")
    def job() -> None:
        time.sleep(0.05)

    app.migrate()
    app.add_schedule("s", "job", every=60, overlap="queue")
    worker = start_worker(app, concurrency=2)
    time.sleep(0.5)  # the worker is up and idle
    now = app.store.now()
    refs = app.backfill("s", start=now - timedelta(minutes=6), end=now - timedelta(minutes=1))
    assert len(refs) == 5
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline and any(r.refresh().status != "succeeded" for r in refs):
        time.sleep(0.05)
    runs = [r.refresh() for r in refs]
    assert [r.status for r in runs] == ["succeeded"] * 5
    for before, after in zip(runs, runs[1:], strict=False):
        assert before.finished_at is not None and after.started_at is not None
        assert after.started_at >= before.finished_at  # one after another
        assert after.started_at - before.finished_at < timedelta(seconds=3)  # a wake-up, not a poll
    worker.stop(wait=True, timeout=10)
