"""An app for the schedule process tests (tests/test_schedules_processes.py).

The database URL comes from ROTA_DATABASE_URL. Handlers append one JSON line per event to
ROTA_TEST_LOG (start/end of every execution, with the run, the tick, the pid and a
time.time() stamp), so a test can check from the handlers' own view that two runs of a
schedule never executed at the same time. ROTA_TEST_SCHEDULES (comma-separated) turns on
the code schedules below; the tests add the others at runtime with app.add_schedule.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

import rota

app = rota.App(
    poll_interval=float(os.environ.get("ROTA_TEST_POLL", "0.05")),
    lease=float(os.environ.get("ROTA_TEST_LEASE", "3")),
    retention=None,
)


def _log(event: str, ctx: rota.RunContext, **extra: Any) -> None:
    path = os.environ.get("ROTA_TEST_LOG")
    if not path:
        return
    line = {
        "event": event,
        "run": ctx.run_id,
        "schedule": ctx.schedule,
        "tick": ctx.scheduled_for.isoformat(),
        "pid": os.getpid(),
        "t": time.time(),
        **extra,
    }
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


@app.task(name="tick", pass_context=True)
def tick(ctx: rota.RunContext, tag: str = "") -> str:
    _log("start", ctx, tag=tag)
    _log("end", ctx, tag=tag)
    return tag


@app.task(name="slow", pass_context=True)
def slow(ctx: rota.RunContext, seconds: float) -> float:
    _log("start", ctx)
    time.sleep(seconds)
    _log("end", ctx)
    return seconds


@app.task(name="slow_async", pass_context=True)
async def slow_async(ctx: rota.RunContext, seconds: float) -> float:
    _log("start", ctx)
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        _log("end", ctx, cancelled=True)
        raise
    _log("end", ctx)
    return seconds


@app.task(name="slow_cooperative", pass_context=True)
def slow_cooperative(ctx: rota.RunContext, seconds: float) -> str:
    """A sync handler that stops early when ctx.cancelled turns true (as RunContext advises)."""
    _log("start", ctx)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ctx.cancelled:
            _log("end", ctx, cancelled=True)
            raise RuntimeError("stopped: cancellation requested")
        time.sleep(0.01)
    _log("end", ctx)
    return "finished"


_enabled = set(filter(None, os.environ.get("ROTA_TEST_SCHEDULES", "").split(",")))
if "every_second" in _enabled:
    app.schedule(every=1, name="every_second")(tick)

if "ROTA_TEST_CLAIM_AHEAD" in os.environ:  # a wider claim-ahead window, for a test to act inside it
    import rota.worker.wakeups

    rota.worker.wakeups.CLAIM_AHEAD = float(os.environ["ROTA_TEST_CLAIM_AHEAD"])
