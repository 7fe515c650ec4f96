"""The base of the worker's background roles: one named asyncio task each, restarted
(and logged) if its body ever dies of an unexpected exception."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger("rota.worker")
MAX_PAUSE = 60.0  # seconds: the longest wait before a failed role starts again


async def supervise(
    body: Callable[[], Awaitable[None]],
    what: str,
    on_restart: Callable[[], None] = lambda: None,
    note: str = "",
    pause: float = 0.05,
) -> None:
    """Run `body` forever: if it raises, log why, call `on_restart`, start it again after
    `pause`, doubled for each failure in a row up to a minute (a body that fails at once
    every time is not restarted in a tight loop, nor logged with a traceback each time)."""
    failures = 0
    while True:
        began = time.monotonic()
        try:
            await body()
            return
        except Exception as exc:
            failures = 1 if time.monotonic() - began > MAX_PAUSE else failures + 1
            delay = min(MAX_PAUSE, pause * 2 ** (failures - 1))
            if failures == 1:
                log.exception("%s failed; restarting it%s", what, note)
            else:
                log.error(
                    "%s failed again (%s: %s); restarting it in %.1f s%s", what, type(exc).__name__, exc, delay, note
                )
            on_restart()
            await asyncio.sleep(delay)


def spawn(name: str, body: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
    """Start a role's task under its name (shown by the loop watchdog and in tracebacks),
    supervised: a body that dies of an unexpected exception is logged and started again a
    second later (a role that ended silently left the worker without heartbeats, wake-ups
    or ticks while it went on claiming)."""
    return asyncio.create_task(supervise(body, f"the {name} role", pause=1.0), name=name)


async def wait_event(event: asyncio.Event, timeout: float) -> None:
    """Wait for `event` at most `timeout` seconds (yield once if the timeout is 0)."""
    if timeout <= 0:
        await asyncio.sleep(0)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout)
