"""The timeouts of thread handlers: one event-loop timer for all of them.

Every run has a timeout since the default timeout (ROTA_DEFAULT_TIMEOUT, 3600 s). A timer
per run (`loop.call_later`, cancelled when the run ends, usually within milliseconds) cost
the event loop's thread a few microseconds a run: a handle made, pushed on the loop's heap,
cancelled, and swept out again (issue 41: a tenth of a no-op drain's worker CPU). Here each
run's deadline is one entry of a dict, and one timer is armed for the earliest: a run that
ends only leaves the dict; a new run re-arms the timer only when its deadline comes before
the armed one. When the timer fires, every run past its deadline times out and the timer is
armed for the next deadline, so each run still times out at its own deadline.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from typing import Any

log = logging.getLogger("rota.worker")


class Deadlines:
    """Runs' deadlines on the event loop's clock; `expire(run)` is called at each one."""

    __slots__ = ("_at", "_due", "_expire", "_loop", "_timer")

    def __init__(self, expire: Callable[[Any], None]) -> None:
        self._due: dict[Any, float] = {}  # run -> its deadline (loop.time())
        self._expire = expire
        self._timer: asyncio.TimerHandle | None = None
        self._at = math.inf  # when the armed timer fires
        self._loop: asyncio.AbstractEventLoop | None = None  # the armed timer's

    def __len__(self) -> int:
        return len(self._due)

    def add(self, run: Any, seconds: float) -> None:
        """Time `run` out `seconds` from now (on the running loop)."""
        loop = asyncio.get_running_loop()
        at = loop.time() + seconds
        self._due[run] = at
        if at < self._at or loop is not self._loop:  # (a worker run again on a new loop)
            self._arm(loop, min(self._due.values()) if loop is not self._loop else at)

    def discard(self, run: Any) -> None:
        """`run` ended: no timeout for it. The armed timer stays (cancelled and armed again
        for each run, it would cost what a timer per run did): firing with nothing due, or
        before the deadlines left, it only scans them and is armed for the next."""
        self._due.pop(run, None)

    def _arm(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._at, self._loop = at, loop
        self._timer = loop.call_at(at, self._fire, loop)

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        # (the loop runs a timer up to its clock's resolution early: the armed time counts)
        now = max(loop.time(), self._at)
        self._timer, self._at, self._loop = None, math.inf, None
        expired = [run for run, at in self._due.items() if at <= now]
        for run in expired:
            del self._due[run]
        if self._due:
            self._arm(loop, min(self._due.values()))
        for run in expired:
            try:
                self._expire(run)
            except Exception:  # (as a timer of its own would be: logged, the others still expire)
                log.exception("the timeout of %r failed", run)
