"""The hand-off of plain `def` handlers (and process watchers) to pool threads and back.

The loop submits each run's body to a lazy pool (rota.executor.DaemonPool, lazy=True):
short handlers share as few threads as keep the CPU busy instead of starting one each
(threads doing tiny I/O spend their time handing the GIL around), while handlers that
block still get threads of their own within a few milliseconds, so `concurrency` handler
bodies can block at once.

Results come back through one deque. A thread that finishes while more calls wait in the
pool goes on to the next call without waking the loop: a sweep on the loop (one timer,
armed while calls are in flight) collects those results every `SWEEP` seconds and lets the
pool grow (`DaemonPool.grow`). A thread that finishes with nothing left waiting wakes the
loop at once. So a burst of tiny runs costs the loop one wake-up per sweep, not one per
run, and a lone run is delivered at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from typing import Any

from ..executor import DaemonPool
from .active import Active

SWEEP = 0.002  # while calls are in flight: collect results and fit the pool's threads this often
SWEEP_MAX = 0.256  # a sweep that finds nothing to do waits twice as long next time, up to this

Result = tuple[str, Any]  # ("ok", result JSON) | ("error", exc) | ("timeout", None) | ...
Deliver = Callable[[Active, Result], None]
Returned = Callable[[Active], None]


class Handoff:
    """Pool threads hand their results to the loop: a wake-up per burst or per sweep."""

    def __init__(self, limit: int, deliver: Deliver) -> None:
        self.limit = limit
        self.pool = DaemonPool(limit, "rota-run", lazy=True)
        self.deliver = deliver
        self.loop: asyncio.AbstractEventLoop | None = None
        self._done: deque[tuple[Active, Result, Returned]] = deque()
        self._scheduled = False
        self._sweep: asyncio.TimerHandle | None = None
        self._every = SWEEP
        self._pending = 0  # calls submitted and not collected yet

    def run(self, active: Active, body: Callable[[], Result], returned: Returned) -> None:
        """On the loop: run body() on a pool thread; its result comes back to `deliver`."""
        self.pool.submit(_Call(self, active, body, returned))
        self._pending += 1
        if self._sweep is not None and self._every > SWEEP:  # a slow sweep: make it quick
            self._sweep.cancel()
            self._sweep = None
        self._every = SWEEP
        if self._sweep is None and self.loop is not None:
            self._sweep = self.loop.call_later(SWEEP, self._swept)

    def put(self, active: Active, outcome: Result, returned: Returned) -> None:
        """On a pool thread: queue the result; wake the loop unless a sweep will collect it."""
        self._done.append((active, outcome, returned))
        if self._scheduled or self.pool.backlog > 0:
            return  # the armed sweep (see _swept) or the wake-up already asked collects it
        self._scheduled = True
        loop = self.loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        self._scheduled = False
        self._collect()

    def _swept(self) -> None:
        """The sweep: collect results and fit the pool; again while calls are in flight
        (a thread that saw calls waiting relies on it), less often while nothing happens."""
        self._sweep = None
        idle = False
        try:
            changed = self.pool.grow()
            idle = self._collect() == 0 and changed == 0 and not self.pool.backlog
        finally:  # (a deliver that raised still leaves the sweep armed for the other results)
            self._every = min(self._every * 2, SWEEP_MAX) if idle else SWEEP  # calls waiting: see STALL
            self._rearm()

    def _rearm(self) -> None:
        loop = self.loop
        if self._sweep is not None:  # a run delivered above armed the next sweep (one at a time)
            return
        if (self._pending > 0 or self._done) and loop is not None and not loop.is_closed():
            self._sweep = loop.call_later(self._every, self._swept)

    def _collect(self) -> int:
        done = self._done
        n = 0
        while done:
            active, outcome, returned = done.popleft()
            n += 1
            if active.done:  # decided already (timeout, lost lease): only its slot matters
                returned(active)
            else:
                self.deliver(active, outcome)
        self._pending = max(0, self._pending - n)
        return n

    def reopen(self) -> None:
        self.pool.close()
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        self._pending, self._every = 0, SWEEP
        self.pool = DaemonPool(self.limit, "rota-run", lazy=True)


class _Call:
    """One run's body on a pool thread (a small object rather than two closures)."""

    __slots__ = ("active", "body", "handoff", "returned")

    def __init__(self, handoff: Handoff, active: Active, body: Callable[[], Result], returned: Returned) -> None:
        self.handoff = handoff
        self.active = active
        self.body = body
        self.returned = returned

    def __call__(self) -> None:
        # A run decided while its call waited for a thread (timed out, lease lost) is not
        # started: its slot comes back at once instead of after a handler nobody awaits.
        outcome = ("lost", None) if self.active.done else self.body()
        self.active.returned = True  # (read by a stopping worker: this handler can no longer run)
        self.handoff.put(self.active, outcome, self.returned)
