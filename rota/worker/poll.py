"""The poll loop: the order the guarantees depend on, in one place.

Each pass: (1) after a database error, renew this worker's own leases and (2) write the
outcomes it computed meanwhile, before anything else; (3) once per poll interval, learn
what is due and rescue expired leases under the rescue rule; (4) claim due runs into free
slots (and, in a backlog of short runs, a little ahead: prefetch.py), taking the queued
outcomes along in the claim's transaction. Schedule ticks are materialized by the ticker
in its own task (it never holds up this loop); heartbeats, the outcome writer and the
wake-ups run in theirs.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from ..errors import DatabaseError
from ..logs import log_event
from ..stores.base import Store
from .claims import Claimer
from .completer import Completer
from .counters import WorkerCounters
from .db import Db
from .leases import Leases
from .outage import Outage
from .rescue import Rescuer
from .service import wait_event
from .ticks import Ticker
from .wakeups import DueTimes

log = logging.getLogger("rota.worker")
_SUMMARY = ("rescued", "claimed", "dispatched", "locked_out", "skipped_at_capacity")


class Poller:
    """Composes leases, completer, rescuer and claimer in the order above."""

    def __init__(
        self,
        worker: str,
        store: Callable[[], Store],
        db: Db,
        due: DueTimes,
        outage: Outage,
        counters: WorkerCounters,
        roles: tuple[Leases, Completer, Rescuer, Claimer, Ticker],
    ) -> None:
        self.worker = worker
        self.store = store
        self.db = db
        self.due = due
        self.outage = outage
        self.counters = counters
        self.leases, self.completer, self.rescuer, self.claimer, self.ticker = roles
        self.queues: list[str] | None = None
        self.poll_interval = 1.0
        self.batch = 1  # claim again once this many slots are free (backlog)
        self.claiming: Callable[[], bool] = lambda: True
        self.flush: Callable[[], Awaitable[bool]] = self.completer.flush
        self._last = dict.fromkeys(_SUMMARY, 0)

    async def run(self) -> None:
        """The poll task."""
        housekeeping_at = 0.0
        while self.claiming():
            try:
                if self.outage.since is not None:
                    await self.reconnect()  # renew our leases and write our outcomes first
                if time.monotonic() >= housekeeping_at:
                    await self.poll_and_rescue()
                    housekeeping_at = time.monotonic() + self.poll_interval
                claimed, asked = await self.claimer.claim_some()
                if asked and claimed < asked:  # drained what is due: learn when the next is due
                    await self.learn_after_claim()
            except DatabaseError as exc:
                if not self.claiming():
                    break
                await self._sleep_or_wake(self.outage.failed(exc))
                continue
            if not self.claiming():
                break
            await self._pace(claimed, asked, housekeeping_at)

    async def _pace(self, claimed: int, asked: int, housekeeping_at: float) -> None:
        """Wait before the next pass: for a batch of slots (backlog), or until due."""
        if asked and claimed == asked:
            # Backlog: claim again once a batch of slots (or prefetch room) is free, or very
            # soon, so that one round trip claims many runs rather than one per handler.
            await self.claimer.gather_slots(*self.claimer.next_batch(self.batch))
            if self.claimer.wanted() <= 0:
                await self.claimer.wait_for_slots(housekeeping_at)
        elif self.claimer.wanted() <= 0:
            self.counters.skipped_at_capacity += 1
            await self.claimer.wait_for_slots(housekeeping_at)
        else:
            await self.claimer.sleep_until(housekeeping_at)

    async def poll_and_rescue(self) -> None:
        """Learn what is due; rescue expired leases when the rescue rule allows it."""
        self.counters.polls += 1
        state = await self.db(self.store().poll_state, self.queues)
        self.due.learn(state)
        if self.due.due(self.due.schedule_due):
            self.due.tick_wake.set()
        await self.rescuer.rescue(state.now)
        self.ticker.emit_unkeyed_skips()  # ticks a flow claim recorded skipped (keying them)
        self._summary()

    async def housekeeping(self) -> None:
        """One whole pass, ticks included (run_until_idle: no ticker task there)."""
        await self.poll_and_rescue()
        await self.ticker.ticks()

    async def learn_after_claim(self) -> None:
        """After a claim that got fewer runs than it asked for. While due limited runs wait
        for a slot, what it learns leaves them out: a wake-up that came during the read (a
        slot freed elsewhere) or outcomes of ours queued meanwhile (slots they free) make it
        claim again at once."""
        store = self.store()
        self.due.learn(await self.db(store.poll_after_claim, self.queues))
        if store.limits_wait() and (self.completer.outbox or self.due.wake.is_set()):
            self.due.run_now()

    async def refresh_due(self) -> None:
        self.due.learn(await self.db(self.store().poll_state, self.queues))

    async def reconnect(self) -> None:
        """After a database error: before any rescue or claim, renew our own leases (raises
        while the database is still away), then end the outage, write the outcomes computed
        meanwhile, and give back the runs of a claim whose reply was lost."""
        self.store_recover()
        await self.leases.renew()
        await self.db(self.store().poll_state, self.queues)  # reachable, even if we hold nothing
        if self.outage.ok():
            await self.rescuer.learn_db_started()
        await self.flush()
        await self.claimer.reconcile()  # a claim whose reply was lost: its runs given back

    async def after_outage(self) -> None:
        """Another task found the database back: renew leases, write results, look again."""
        self.store_recover()
        with contextlib.suppress(DatabaseError):
            await self.leases.renew()
            await self.rescuer.learn_db_started()
        self.completer.ready.set()

    def store_recover(self) -> None:
        recover = getattr(self.store(), "recover", None)
        if recover is not None:
            with contextlib.suppress(Exception):
                recover()

    async def _sleep_or_wake(self, delay: float) -> None:
        self.due.wake.clear()
        await wait_event(self.due.wake, delay)

    def _summary(self) -> None:
        """poll_summary (debug): what this worker did since the previous poll."""
        if not log.isEnabledFor(logging.DEBUG):
            return
        now = {name: getattr(self.counters, name) for name in _SUMMARY}
        delta = {name: now[name] - self._last[name] for name in _SUMMARY}
        self._last = now
        delta["swept"] = delta.pop("rescued")
        message = "poll: " + ", ".join(f"{k} {v}" for k, v in delta.items())
        log_event(log, logging.DEBUG, "poll_summary", message, worker=self.worker, **delta)
