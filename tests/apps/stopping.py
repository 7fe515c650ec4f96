"""An app for the shutdown tests (tests/test_stop_while_running.py): handlers that outlive
the shutdown timeout, a `worker_stopped` hook that takes a second, and evidence of what
ran when. The database URL comes from ROTA_DATABASE_URL.

Every handler appends JSON lines to ROTA_TEST_LOG: "start", a "beat" every 20 ms while it
runs, "end"; each with the run, its token, the group it must not overlap in ("limit:KEY" or
"schedule:NAME"), the pid and a time.time() stamp. A handler killed with its process leaves
its last beat as its last sign of life."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from typing import Any

import rota

app = rota.App(retention=None)
LONG = float(os.environ.get("ROTA_TEST_LONG", "4"))  # the first attempt's length: past the shutdown


def _log(event: str, ctx: rota.RunContext, group: str) -> None:
    path = os.environ.get("ROTA_TEST_LOG")
    if not path:
        return
    line = {"event": event, "run": ctx.run_id, "token": ctx.token, "attempt": ctx.attempt, "group": group,
            "pid": os.getpid(), "t": time.time()}  # fmt: skip
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def _work(ctx: rota.RunContext, group: str) -> str:
    """The first attempt runs LONG seconds (it ignores ctx.cancelled), the others 0.2 s."""
    _log("start", ctx, group)
    deadline = time.monotonic() + (LONG if ctx.attempt == 1 else 0.2)
    while time.monotonic() < deadline:
        time.sleep(0.02)
        _log("beat", ctx, group)
    _log("end", ctx, group)
    return group


@app.task(name="export", pass_context=True, limit=rota.Limit(1, by="customer"), retries=2, backoff=0)
def export(ctx: rota.RunContext, customer: str) -> str:
    return _work(ctx, f"limit:{customer}")


@app.task(name="nightly", pass_context=True, retries=2, backoff=0)
def nightly(ctx: rota.RunContext) -> str:
    return _work(ctx, f"schedule:{ctx.schedule}")


@app.task(name="polite", pass_context=True, retries=2, backoff=0)
def polite(ctx: rota.RunContext, seconds: float) -> str:
    """Stops when asked: looks at ctx.cancelled every `seconds` (a check between two chunks of
    work), as the deploy guide advises a handler that may outlive the drain to do."""
    _log("start", ctx, "polite")
    while not ctx.cancelled:
        time.sleep(seconds)
    _log("end", ctx, "polite")
    return "stopped"


@app.task(name="export_async", pass_context=True, limit=rota.Limit(1, by="customer"), retries=2, backoff=0)
async def export_async(ctx: rota.RunContext, customer: str) -> str:
    """Ignores cancellation while it runs (catches CancelledError and goes on)."""
    group = f"limit:{customer}"
    _log("start", ctx, group)
    deadline = time.monotonic() + (LONG if ctx.attempt == 1 else 0.2)
    while time.monotonic() < deadline:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0.02)
        _log("beat", ctx, group)
    _log("end", ctx, group)
    return group


@app.task(name="export_to_thread", pass_context=True, limit=rota.Limit(1, by="customer"), retries=2, backoff=0)
async def export_to_thread(ctx: rota.RunContext, customer: str) -> str:
    """Awaits its work in a thread (asyncio.to_thread): cancelled, the coroutine ends at once,
    the thread runs on."""
    return await asyncio.to_thread(_work, ctx, f"limit:{customer}")


if os.environ.get("ROTA_TEST_SCHEDULE"):
    app.schedule(every=1, name="nightly", overlap="skip")(nightly)

if os.environ.get("ROTA_TEST_HOOK_SLEEP"):

    @app.on("worker_stopped")
    def slow_hook(event: Any) -> None:
        time.sleep(float(os.environ["ROTA_TEST_HOOK_SLEEP"]))
