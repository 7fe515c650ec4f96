"""Maintenance: pruning finished runs past their retention and workers long gone, in
small batches, under a shared lease (one worker at a time does it).

A prune statement is a write: on SQLite it holds the database's one write lock (claims and
finishes wait for it), on PostgreSQL row locks on final runs only. So each statement deletes
as many runs as take about STATEMENT_TARGET seconds, judged from the statements before it
(the cost per run grows with the table's indexes and size), and the next one waits three
times as long as the last took: claims get at least three quarters of the time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from ..errors import DatabaseError
from ..stores.base import Store
from .counters import WorkerCounters
from .db import Db

log = logging.getLogger("rota.worker")
STATEMENT_TARGET = 0.005  # seconds one prune statement should take
FIRST_BATCH, MIN_BATCH, MAX_BATCH = 200, 20, 5000
MIN_PAUSE = 0.02


@dataclass
class PruneBatch:
    """How many runs the next prune statement deletes, and how long to wait before it."""

    size: int = FIRST_BATCH
    target: float = STATEMENT_TARGET

    def took(self, rows: int, seconds: float) -> None:
        """A statement deleted `rows` in `seconds`: aim the next at the target, moving at most
        2x up or 4x down a step (one slow statement, a lock wait, does not swing it far)."""
        if rows <= 0:
            return
        ideal = self.target * rows / seconds if seconds > 0 else float(MAX_BATCH)
        self.size = int(max(MIN_BATCH, min(MAX_BATCH, 2 * self.size, max(ideal, self.size / 4))))

    @staticmethod
    def pause(seconds: float) -> float:
        return max(MIN_PAUSE, 3 * seconds)


class Maintenance:
    def __init__(
        self,
        worker: str,
        store: Callable[[], Store],
        db: Db,
        counters: WorkerCounters,
        retention: dict[str, timedelta],
        interval: float,
        app_lease: float,
    ) -> None:
        self.worker = worker
        self.store = store
        self.db = db
        self.counters = counters
        self.retention = retention
        self.interval = interval
        self.app_lease = app_lease

    async def run(self) -> None:
        """The maintenance task (nothing to do without a retention)."""
        if not self.retention:
            return
        while True:
            await asyncio.sleep(self.interval * random.uniform(0.8, 1.2))
            with contextlib.suppress(DatabaseError):
                await self.prune(self.retention)

    async def prune(self, retention: dict[str, timedelta]) -> int:
        store = self.store()
        token = await self.db(store.lock_acquire, "rota:prune", self.worker, 60.0)
        if token is None:
            return 0
        total = 0
        try:
            for status, keep in retention.items():
                total += await self._prune_status(store, status, keep)
            keep_workers = min(k.total_seconds() for k in retention.values())
            await self.db(store.prune_workers, self.app_lease * 3, keep_workers)
        finally:
            await self.db(store.lock_release, "rota:prune", self.worker, token)
        self.counters.pruned += total
        if total:
            log.info("pruned %d finished runs past their retention", total)
        return total

    async def _prune_status(self, store: Store, status: str, keep: timedelta) -> int:
        total, batch = 0, PruneBatch()
        while True:
            size, started = batch.size, time.monotonic()
            n = await self.db(store.prune, status, keep.total_seconds(), size)
            took = time.monotonic() - started
            total += n
            if n < size:
                return total
            batch.took(n, took)
            await asyncio.sleep(batch.pause(took))
