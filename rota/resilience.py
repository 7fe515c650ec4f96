"""The worker's view of database faults and of its own event loop.

`Outage` tracks database failures (one warning when they start, one line when they end,
backoff in between) and decides when this worker may rescue other workers' runs: never while
its own connection fails, and only one full lease after it came back (so that every owner
had a whole lease of working database to renew its leases), and on PostgreSQL only once the
server has been up for a lease (a restart is an outage for everybody). `LoopWatch` measures
how late the event loop wakes up and names the run whose `async def` handler blocked it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from .errors import DatabaseUnavailable

log = logging.getLogger("rota.worker")


class Outage:
    """Failures of the database as this worker sees them, and the rescue gate."""

    def __init__(self, lease: float, max_backoff: float) -> None:
        self.lease = lease
        self.max_backoff = max_backoff
        self.since: float | None = None
        self.failures = 0
        self.rescue_after = 0.0  # monotonic
        self.db_started: datetime | None = None

    def failed(self, exc: BaseException) -> float:
        """Record a failure; the delay before the next try."""
        self.failures += 1
        if self.since is None:
            self.since = time.monotonic()
            what = "database unavailable" if isinstance(exc, DatabaseUnavailable) else "database error"
            log.warning("%s (%s); the worker keeps its leases and retries with backoff", what, exc)
        return float(min(self.max_backoff, 0.2 * 2 ** min(self.failures, 6)) * random.uniform(0.75, 1.25))

    def ok(self) -> bool:
        """Record a success; True if this ended an outage (rescue waits one more lease)."""
        if self.since is None:
            return False
        log.warning("database is back after %.1f s", time.monotonic() - self.since)
        self.since = None
        self.failures = 0
        self.rescue_after = time.monotonic() + self.lease
        return True

    def may_rescue(self, db_now: datetime) -> bool:
        """The rescue rule: no outage now, a lease since the last one, and the database
        server (PostgreSQL: `pg_postmaster_start_time()`) up for at least a lease."""
        if self.since is not None or time.monotonic() < self.rescue_after:
            return False
        started = self.db_started
        return started is None or db_now >= started + timedelta(seconds=self.lease)


class LoopWatch:
    """Warn when the event loop was blocked (an `async def` handler calling time.sleep or
    doing CPU work): a watchdog thread notes which task was running while the loop was
    stuck; the loop logs it when it runs again."""

    def __init__(self, threshold: float = 0.5, tick: float = 0.1) -> None:
        self.threshold = threshold
        self.tick = tick
        self.beat = time.monotonic()
        self.culprit: str | None = None
        self.blocked = 0  # number of times the loop was found blocked
        self._stop = threading.Event()

    async def run(self, describe: Callable[[str], str]) -> None:
        """On the loop: beat, and report lag. `describe` turns a task name into a label."""
        loop = asyncio.get_running_loop()
        watchdog = threading.Thread(target=self._watch, args=(loop, describe), name="rota-loopwatch", daemon=True)
        watchdog.start()
        try:
            while True:
                before = time.monotonic()
                self.beat = before
                await asyncio.sleep(self.tick)
                lag = time.monotonic() - before - self.tick
                if lag >= self.threshold:
                    self._report(lag)
        finally:
            self._stop.set()

    def _report(self, lag: float) -> None:
        self.blocked += 1
        label = self.culprit or "unknown code"
        self.culprit = None
        log.warning(
            "the event loop was blocked for %.2f s by %s: an async def handler must not block "
            "(use await asyncio.sleep, or a plain def handler, which runs on a thread)",
            lag,
            label,
        )

    def _watch(self, loop: asyncio.AbstractEventLoop, describe: Callable[[str], str]) -> None:
        while not self._stop.wait(self.tick):
            if loop.is_closed():
                return
            if time.monotonic() - self.beat >= self.threshold and self.culprit is None:
                task = asyncio.current_task(loop)
                if task is not None:
                    self.culprit = describe(task.get_name())  # named now: the run may end soon
