"""Maintenance: pruning finished runs past their retention and workers long gone, in
small batches, under a shared lease (one worker at a time does it)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from datetime import timedelta

from ..errors import DatabaseError
from ..stores.base import Store
from .counters import WorkerCounters
from .db import Db

log = logging.getLogger("rota.worker")
BATCH = 1000


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
        total = 0
        while True:
            n = await self.db(store.prune, status, keep.total_seconds(), BATCH)
            total += n
            if n < BATCH:
                return total
            await asyncio.sleep(0.05)
