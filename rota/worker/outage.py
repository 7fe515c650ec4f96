"""Outage state: database failures as this worker sees them, and the rescue gate.

One warning when an outage starts, one line when it ends, backoff in between. Rescue is
allowed never while this worker's own calls fail, only one full lease after it came back
(so that every owner had a whole lease of working database to renew its leases), and on
PostgreSQL only once the server has been up for a lease (a restart is an outage for all).
"""

from __future__ import annotations

import logging
import random
import time
from datetime import datetime, timedelta

from ..errors import DatabaseUnavailable
from ..logs import log_event

log = logging.getLogger("rota.worker")


class Outage:
    """Failures of the database as this worker sees them, and the rescue gate."""

    def __init__(self, lease: float, max_backoff: float, worker: str | None = None) -> None:
        self.lease = lease
        self.max_backoff = max_backoff
        self.worker = worker
        self.since: float | None = None
        self.failures = 0
        self.rescue_after = 0.0  # monotonic
        self.db_started: datetime | None = None

    def failed(self, exc: BaseException, starting: bool = False) -> float:
        """Record a failure; the delay before the next try. `starting`: the worker has not
        started yet (it holds nothing)."""
        self.failures += 1
        if self.since is None:
            self.since = time.monotonic()
            what = "database unavailable" if isinstance(exc, DatabaseUnavailable) else "database error"
            does = (
                "retries with backoff until it can start" if starting else "keeps its leases and retries with backoff"
            )
            message = f"{what} ({exc}); the worker {does}"
            log_event(log, logging.WARNING, "database_unavailable", message, worker=self.worker, error=str(exc))
        return float(min(self.max_backoff, 0.2 * 2 ** min(self.failures, 6)) * random.uniform(0.75, 1.25))

    def ok(self) -> bool:
        """Record a success; True if this ended an outage (rescue waits one more lease)."""
        if self.since is None:
            return False
        duration = time.monotonic() - self.since
        message = f"database is back after {duration:.1f} s"
        log_event(log, logging.WARNING, "database_back", message, worker=self.worker, duration=round(duration, 3))
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
