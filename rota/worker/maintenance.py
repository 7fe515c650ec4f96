"""Maintenance: pruning finished runs past their retention and workers long gone, in
small batches, under a shared lease (one worker at a time does it); and on PostgreSQL the
history sweep, which moves to rota_history the succeeded runs a finish did not move itself.

A prune statement is a write: on SQLite it holds the database's one write lock (claims and
finishes wait for it), on PostgreSQL row locks on final runs only. So each statement deletes
as many runs as take about `statement_target` seconds beyond the statement's fixed cost (the
commit, the round trip, a trigger: the fastest statement of the pass, a small one, stands for
it), judged from the statements before it (the cost per run grows with the table's indexes
and size), and the next one waits three times as long as the last took: claims get at least
three quarters of the time. A pass ends within PASS_SECONDS, well inside the pruning lease
(LOCK_TTL): what is left waits for the next pass.
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
from typing import Any

from ..errors import DatabaseError
from ..stores.base import Store
from .counters import WorkerCounters
from .db import Db

log = logging.getLogger("rota.worker")
STATEMENT_TARGET = 0.005  # seconds a prune statement should take beyond its fixed cost
# SQLite: every prune statement holds the one write lock, so shorter ones. At 10,000,000 runs
# kept, 3 alternated rounds (bench/results/issue19-prune-sqlite-2core-2026-12-02.md): statement
# p99 14.8 -> 10.4 ms (2 ms: 11.7), a probe task's start lateness p99 21 -> 18 ms, the prune
# 0.65x as fast (the commit's fixed cost weighs more); bench.history: p99 16.9 -> 11.9 ms, 2.2x
# as long. A pass gives the succeeded runs the shares the other statuses do not need.
SQLITE_STATEMENT_TARGET = 0.003
FIRST_BATCH, MIN_BATCH, MAX_BATCH = 20, 20, 5000
MIN_PAUSE = 0.02
LOCK_TTL, PASS_SECONDS = 60.0, 40.0
SWEEP_SECONDS, SWEEP_BATCH = 20.0, 2000  # the history sweep (PostgreSQL, schema 17)
FLOW_CHECK_SECONDS = 60.0  # how often a worker looks for damaged limits, rates and task specs


def statement_target(store: Store) -> float:
    return SQLITE_STATEMENT_TARGET if store.dialect == "sqlite" else STATEMENT_TARGET


@dataclass
class PruneBatch:
    """How many runs the next prune statement deletes, and how long to wait before it."""

    size: int = FIRST_BATCH
    target: float = STATEMENT_TARGET
    fastest: float = float("inf")  # the pass's fastest statement: its fixed cost, about

    def took(self, rows: int, seconds: float) -> None:
        """A statement deleted `rows` in `seconds`: aim the next at the fixed cost plus the
        target, moving at most 2x up or 4x down a step (one slow statement, a lock wait, does
        not swing it far). A fixed cost above the target (a slow commit) never starves the
        batch: the aim is at least twice the fastest statement."""
        if rows <= 0:
            return
        self.fastest = min(self.fastest, seconds)
        aim = max(self.fastest + self.target, 2 * self.fastest)
        ideal = aim * rows / seconds if seconds > 0 else float(MAX_BATCH)
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
        self._not_before = 0.0  # during a pass: the next prune statement waits until then

    async def run(self) -> None:
        """The maintenance task: the history sweep, the check for damaged flow-control rows,
        and pruning with a retention."""
        helpers = [asyncio.create_task(self.sweep_forever()), asyncio.create_task(self.watch_flow())]
        try:
            if not self.retention:
                await asyncio.gather(*helpers)
                return
            while True:
                await asyncio.sleep(self.interval * random.uniform(0.8, 1.2))
                with contextlib.suppress(DatabaseError):
                    await self.prune(self.retention)
        finally:
            for helper in helpers:
                helper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await helper

    async def watch_flow(self) -> None:
        """Now and then (soon after the start, then every FLOW_CHECK_SECONDS), name the
        stored limits, rates and task specs that are damaged, once each (rota.quarantine):
        the flow claim's statements already set them aside, silently; and set aside the runs
        waiting on parents that are gone (transition `orphaned`) or with a pool and no key
        (`keyless`); log the limit and rate names runs wait under that no worker declared
        (rota.undeclared: a line per name, again only after an hour)."""
        store: Any = self.store()  # a SQL store (the others have no flow-control rows)
        if not hasattr(store, "damaged_flow"):
            return
        delay = min(2.0, FLOW_CHECK_SECONDS)
        while True:
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = FLOW_CHECK_SECONDS
            try:
                await self.db(store.damaged_flow)
                await self.db(store.fail_orphaned)
                await self.db(store.fail_keyless)
                await self.db(store.undeclared_flow, True)
            except DatabaseError:
                pass  # an outage, or an older schema: the next check tries again
            except Exception:  # a bug must not end the check for the worker's life
                log.exception("the check for damaged limits and rates failed")

    async def sweep_forever(self) -> None:
        """`sweep` now and then (PostgreSQL; elsewhere it stops at once)."""
        if self.store().dialect != "postgresql":
            return
        while True:
            await asyncio.sleep(SWEEP_SECONDS * random.uniform(0.5, 1.0))
            try:
                await self.sweep()
            except DatabaseError:
                pass  # an outage: the next pass tries again
            except Exception:  # a bug must not end the sweep for the worker's life
                log.exception("the history sweep failed; it tries again in %.0f s", SWEEP_SECONDS)

    async def sweep(self) -> int:
        """Move the succeeded runs a finish left among the active ones (an earlier schema's,
        a transactional handler's) to the history, SWEEP_BATCH at a time, each batch its own
        transaction and followed by a pause three times as long: after an upgrade that moves
        millions, claims get three quarters of the time. Any number of workers can sweep at
        once (a batch skips the rows another holds). A pass ends within PASS_SECONDS."""
        store, moved = self.store(), 0
        end = time.monotonic() + PASS_SECONDS
        while time.monotonic() < end:
            started = time.monotonic()
            n = await self.db(store.move_history, SWEEP_BATCH)
            moved += n
            if n < SWEEP_BATCH:
                break
            await asyncio.sleep(PruneBatch.pause(time.monotonic() - started))
        if moved:
            log.info("moved %d succeeded runs to the history table", moved)
        return moved

    async def prune(self, retention: dict[str, timedelta]) -> int:
        store = self.store()
        token = await self.db(store.lock_acquire, "rota:prune", self.worker, LOCK_TTL)
        if token is None:
            return 0
        before = self.counters.pruned
        try:
            await self._prune_statuses(store, retention)
            keep_workers = min(k.total_seconds() for k in retention.values())
            await self.db(store.prune_workers, self.app_lease * 3, keep_workers)
        finally:
            await self.db(store.lock_release, "rota:prune", self.worker, token)
            total = self.counters.pruned - before
            if total:
                log.info("pruned %d finished runs past their retention", total)
        return total

    async def _prune_statuses(self, store: Store, retention: dict[str, timedelta]) -> None:
        """Each status gets an equal share of what is left of the pass. The time a status
        did not need (nothing more to prune) goes to those whose share ran out, in further
        rounds while the pass lasts, each going on from where it stopped (its cursor and its
        batch size). Every statement waits for the pause of the one before, whichever status
        it was for: claims get their three quarters across statuses and rounds too."""
        end = time.monotonic() + PASS_SECONDS
        target = statement_target(store)
        left = {status: (PruneBatch(target=target), 0.0) for status in retention}  # batch, cursor
        self._not_before = 0.0  # before `end`: the first round always runs, for every status
        first = True
        while left and self._not_before < end:
            names = list(left)
            for i, status in enumerate(names):
                start = max(time.monotonic(), self._not_before)
                if start >= end and not first:
                    break  # a later round stops where the pass ends
                batch, after = left[status]
                done, after = await self._prune_status(
                    store, status, retention[status], batch, after, start + max(0.0, end - start) / (len(names) - i)
                )
                if done:
                    del left[status]
                else:
                    left[status] = batch, after
            first = False
        if left:
            log.debug("pruning %s runs continues next pass (this pass is spent)", ", ".join(left))

    async def _prune_status(
        self, store: Store, status: str, keep: timedelta, batch: PruneBatch, after: float, deadline: float
    ) -> tuple[bool, float]:
        """Batches until none is full (True: nothing more to prune) or the share is spent
        (False); each batch is counted as it is deleted (an error later in the pass keeps the
        count). Each goes on from the last finish time the one before deleted (Store.prune_from)."""
        while True:
            wait = self._not_before - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            size, started = batch.size, time.monotonic()
            n, after = await self.db(store.prune_from, status, keep.total_seconds(), size, after)
            took = time.monotonic() - started
            self.counters.pruned += n
            self._not_before = time.monotonic() + batch.pause(took)
            if n < size:
                return True, after
            batch.took(n, took)
            if self._not_before >= deadline:
                return False, after
