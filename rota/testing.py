"""Helpers for testing code that uses rota: run what is due inline, check what was enqueued.

    def test_signup_sends_welcome(app):
        signup("a@b.c")
        run = rota.testing.assert_enqueued(app, send_welcome, "a@b.c")
        rota.testing.run_pending(app)
        assert app.get_run(run.id).status == "succeeded"

Use a `rota.FakeClock` (`App(..., clock=clock)`) to move time for delayed runs, retries
and schedules: `clock.advance(timedelta(hours=1)); run_pending(app)`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .app import App
from .clock import FakeClock
from .models import Run
from .tasks import Task

__all__ = ["FakeClock", "assert_enqueued", "run_pending"]


def run_pending(app: App, *, concurrency: int = 1) -> int:
    """Execute every run that is due now (materializing due schedule ticks first) in this
    process, until nothing is due; return how many ran. Runs due later (delays, retry
    backoff) stay pending until the clock reaches them."""
    worker = app.worker(concurrency=concurrency, install_signal_handlers=False, flush_interval=0)
    return asyncio.run(worker.run_until_idle())


def assert_enqueued(app: App, task: Task[..., Any] | str, *args: Any, **kwargs: Any) -> Run:
    """The pending run of `task` called with exactly these arguments, or AssertionError
    listing the pending runs of that task."""
    name = task if isinstance(task, str) else task.name
    pending = app.list_runs(status="pending", task=name, limit=1000)
    for run in pending:
        if run.args == list(args) and run.kwargs == kwargs:
            return run
    seen = "\n".join(f"  run {r.id}: args={r.args} kwargs={r.kwargs}" for r in pending) or "  (none)"
    raise AssertionError(
        f"no pending run of {name} with args={list(args)} kwargs={kwargs}; pending runs of {name}:\n{seen}"
    )
