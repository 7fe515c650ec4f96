"""The rescuer: takes back runs whose lease expired (their worker died or was cut off),
retrying them or failing them when no attempt is left. No leader: every worker's poll
tries, but only under the rescue rule (outage.Outage.may_rescue): never during this
worker's own outage, and only after it renewed its own leases and wrote its outcomes."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from datetime import datetime

from .. import quarantine
from ..errors import DatabaseError
from ..events import OUTCOME_EVENTS
from ..logs import log_event
from ..stores.base import Store
from .counters import WorkerCounters
from .db import Db
from .outage import Outage

log = logging.getLogger("rota.worker")


class Rescuer:
    def __init__(
        self,
        worker: str,
        store: Callable[[], Store],
        db: Db,
        outage: Outage,
        counters: WorkerCounters,
        emit: Callable[..., None],
    ) -> None:
        self.worker = worker
        self.store = store
        self.db = db
        self.outage = outage
        self.counters = counters
        self.emit = emit
        self.use_db_start = True  # False with a configured clock (its time is not the server's)

    async def rescue(self, db_now: datetime, limit: int = 100) -> int:
        """Rescue expired leases if the rescue rule allows it now; the number rescued (runs
        whose lease no worker can have granted are ended as damaged and named instead)."""
        if not self.outage.may_rescue(db_now):
            return 0
        rescued = await self.db(self.store().rescue, limit)
        for r in rescued:
            if r.damaged:  # a lease no worker can have granted: set aside, named once
                quarantine.report(quarantine.RUN, r.id, quarantine.reason_of(r.message), task=r.task)
                self.emit(OUTCOME_EVENTS[r.status], run_id=r.id, detail=r.message)
                continue
            self.counters.rescued += 1
            log_event(
                log,
                logging.WARNING,
                "run_rescued",
                f"rescued run {r.id} ({r.task}) from a lost worker: {r.message}; now {r.status}",
                run_id=str(r.id),
                task=r.task,
                worker=self.worker,
                error=r.message,
            )
            self.emit("run_rescued", run_id=r.id, detail=r.message)
            if r.status in OUTCOME_EVENTS:
                self.emit(OUTCOME_EVENTS[r.status], run_id=r.id, detail=r.message)
        return sum(not r.damaged for r in rescued)

    async def learn_db_started(self) -> None:
        """When the database server started (PostgreSQL), for the rescue rule."""
        if not self.use_db_start:
            return
        with contextlib.suppress(DatabaseError):
            self.outage.db_started = await self.db(self.store().database_started)
