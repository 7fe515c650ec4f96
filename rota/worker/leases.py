"""Leases: heartbeats renew every run this worker holds, notice lost leases, pass on
cancellation requests; after an outage the poller renews through here before anything else.

The heartbeat statement is token-checked and ignores `lease_until`: a run is ours while
nobody else took it, so renewing after an outage keeps runs whose lease ran out meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from ..errors import DatabaseError
from ..logs import log_event
from ..serialization import simple_error
from ..stores.base import Claimed, Outcome, Store
from .active import Active
from .completer import Completer
from .counters import WorkerCounters
from .db import Db
from .executors import Executors
from .outage import Outage
from .prefetch import Prefetch
from .service import wait_event

log = logging.getLogger("rota.worker")
# Why a run's lease was lost when the database has no row for it at all.
GONE = "the database has no such run: deleted, or a write lost in a failover to an asynchronous replica"


class Leases:
    """Keeps this worker's runs (running, or their outcome not yet written) its own."""

    def __init__(
        self,
        worker: str,
        store: Callable[[], Store],
        db: Db,
        executors: Executors,
        completer: Completer,
        outage: Outage,
        counters: WorkerCounters,
    ) -> None:
        self.worker = worker
        self.store = store
        self.db = db
        self.executors = executors
        self.completer = completer
        self.outage = outage
        self.counters = counters
        self.lease = 0.0
        self.interval = 0.0
        self.complete: Callable[[Active, tuple[str, None]], None] = lambda active, outcome: None
        self.registry: Callable[[], tuple[str, int]] = lambda: ("running", 0)
        self.prefetch = Prefetch(0)  # runs claimed ahead: renewed like running ones
        self.start_held: Callable[[], None] = lambda: None  # Claimer.start_held (the worker sets it)
        self._confirming: set[asyncio.Task[None]] = set()
        self.kept: list[Active] = []  # a stopping worker's runs whose handlers still run (shutdown.py)
        self.changed = asyncio.Event()  # the registry row should be written now

    async def run(self) -> None:
        """The heartbeat task: renew every `interval` seconds; between beats, write the
        registry at once when the number of stuck handler threads changed (app.stats() and
        `rota workers` must not lag by a heartbeat)."""
        beat = time.monotonic() + self.interval
        while True:
            self.changed.clear()
            await wait_event(self.changed, beat - time.monotonic())
            if time.monotonic() >= beat:
                await self.heartbeat()
                beat = time.monotonic() + self.interval
            else:
                await self.seen()

    def registry_changed(self) -> None:
        """On the loop: what the registry shows changed (a stuck thread came or went)."""
        self.changed.set()

    async def heartbeat(self) -> None:
        try:
            await self.renew()
        except DatabaseError as exc:
            self.outage.failed(exc)
            return
        await self.save_progress()
        await self.seen()

    async def save_progress(self) -> None:
        """ctx.progress of the runs in flight (rota.durable): the last value each handler set
        since the previous heartbeat, in one transaction; at most one write per run per beat."""
        rows = []
        for run_id, active in self.executors.inflight.items():
            durable = active.durable
            if durable is not None and durable.progress is not None:
                (fraction, message), durable.progress = durable.progress, None
                rows.append((run_id, active.claim.token, fraction, message))
        if rows:
            try:  # secondary, as the registry: a failure loses one beat's progress, not the renewal
                await self.db(self.store().save_progress, rows)
            except DatabaseError as exc:
                log.debug("could not save the runs' progress: %s", exc)

    async def seen(self) -> None:
        """Write the worker registry row (state, stuck threads)."""
        state, stuck = self.registry()
        try:  # the registry is secondary: its failure must not lose the renewal's news
            await self.db(self.store().worker_seen, self.worker, state, stuck)
        except DatabaseError as exc:
            log.debug("could not update the worker registry: %s", exc)

    async def renew(self) -> None:
        """Renew the lease of every run this worker holds (running, or its outcome queued or
        being written), token-checked and whether or not the lease has expired meanwhile;
        stop the runs that were lost, pass on cancellation requests. Raises DatabaseError."""
        held = self.holding()
        deadline = time.monotonic() + self.lease
        alive, cancel = await self.db(self.store().heartbeat, held, self.lease)
        self.prefetch.renewed(alive, deadline)
        self._apply(held, alive, cancel, await self._gone([run_id for run_id, _ in held if run_id not in alive]))

    async def _gone(self, lost: list[int]) -> set[int]:
        """Of runs whose lease was lost (rare), those the database has no row for at all:
        deleted, or a write lost when an asynchronous replica was promoted (one read each,
        the first 20; on any error, none: they are reported as lost)."""
        gone = set()
        for run_id in lost[:20]:
            try:
                if await self.db(self.store().get_run, run_id) is None:
                    gone.add(run_id)
            except (DatabaseError, ValueError) as exc:
                log.debug("could not look up run %s: %s", run_id, exc)
                return set()
        return gone

    def holding(self) -> list[tuple[int, int]]:
        """(run id, token) of every run this worker holds: running, held, its outcome queued
        or being written, or kept by a stopping worker (what renew renews, and what a claim
        whose reply was lost is reconciled against: Claimer.reconcile)."""
        held = [(run_id, a.claim.token) for run_id, a in self.executors.inflight.items()] + self.completer.held()
        held += self.prefetch.tokens()
        if self.kept:
            held += [(a.claim.id, a.claim.token) for a in self.kept]
        return held

    def check_soon(self, runs: list[tuple[int, int]]) -> None:
        """The store refused the start of these runs (started here): renew them at once, so a
        lost one is stopped and a cancelled one asked to stop."""
        task = asyncio.get_running_loop().create_task(self._check(runs))
        self._confirming.add(task)
        task.add_done_callback(self._confirming.discard)

    async def _check(self, runs: list[tuple[int, int]]) -> None:
        try:
            alive, cancel = await self.db(self.store().heartbeat, runs, self.lease)
        except DatabaseError as exc:  # the next heartbeat decides
            log.debug("could not check runs whose start was refused: %s", exc)
            return
        self._apply(runs, alive, cancel)

    def _apply(
        self,
        held: list[tuple[int, int]],
        alive: set[int],
        cancel: set[int],
        gone: frozenset[int] | set[int] = frozenset(),
    ) -> None:
        """A renewal's news: stop the runs that were lost (`gone`: the database has no such
        run), pass on cancellation requests."""
        inflight = self.executors.inflight
        for run_id, token in held:
            if run_id in alive:
                continue
            active = inflight.get(run_id)
            if self.kept and any(a.claim.id == run_id and a.claim.token == token for a in self.kept):
                self.kept = [a for a in self.kept if a.claim.id != run_id]  # rescued (an outage): not ours
                log.warning("run %s: lease lost while its handler still runs after the worker stopped", run_id)
            elif active is not None and not active.done and active.claim.token == token:
                self.lost(active, run_id in gone)
            elif (claim := self.prefetch.get(run_id)) is not None and claim.token == token:
                self.lost_held(claim, run_id in gone)
        for run_id in cancel:
            self.request_cancel(run_id, confirmed=True)

    def lost_held(self, claim: Claimed, gone: bool = False) -> None:
        """A run claimed ahead and not started lost its lease: it must never start."""
        self.prefetch.drop(claim.id)
        self.counters.lost += 1
        why = GONE if gone else "rescued by another worker"
        log.warning("run %s (%s): lease lost before it started (%s); dropped", claim.id, claim.task, why)

    def lost(self, active: Active, gone: bool = False) -> None:
        """Someone else holds the run now, or (`gone`) nobody: the database has no such run.
        Stop it; its result will never be written."""
        if not self.executors.may_decide(active):  # the heartbeat waited for its commit: the commit decides
            return
        self.counters.lost += 1
        c = active.claim
        why = GONE if gone else "rescued by another worker"
        log_event(
            log,
            logging.WARNING,
            "run_missing" if gone else "lease_lost",
            f"run {c.id} ({c.task}): lease lost ({why}); stopping it, its result will be discarded",
            run_id=str(c.id),
            task=c.task,
            attempt=c.attempt,
            worker=self.worker,
        )
        self.executors.stop(active, lost=True)
        self.complete(active, ("lost", None))

    def request_cancel(self, run_id: int, confirmed: bool = False) -> None:
        """A run was asked to stop: `confirmed` by the heartbeat (this store's own rows), or
        by a wake-up (a NOTIFY, which does not say which schema's run: confirmed first)."""
        active = self.executors.inflight.get(run_id)
        if active is None:
            if confirmed:
                self.cancel_held(run_id)
            elif self.prefetch.get(run_id) is not None:
                self._confirm_soon(run_id)
            return
        if active.cancel_requested:
            return
        log.info("run %s (%s): cancellation requested", run_id, active.claim.task)
        active.cancel_requested = True
        self.executors.stop(active, lost=False)

    def cancel_held(self, run_id: int) -> None:
        """Cancellation of a run claimed ahead: it never starts; it is recorded cancelled."""
        claim = self.prefetch.drop(run_id)
        if claim is None:
            return
        log.info("run %s (%s): cancellation requested before it started", run_id, claim.task)
        self.counters.cancelled += 1
        error = simple_error("Cancelled", "cancelled on request")
        self.completer.put(Outcome(claim.id, claim.token, "cancelled", error=error))

    def _confirm_soon(self, run_id: int) -> None:
        """Hold a run claimed ahead back (it does not start) until the database confirms its
        cancellation or not."""
        self.prefetch.doubted.add(run_id)
        task = asyncio.get_running_loop().create_task(self._confirm(run_id))
        self._confirming.add(task)
        task.add_done_callback(self._confirming.discard)

    async def _confirm(self, run_id: int) -> None:
        try:
            claim = self.prefetch.get(run_id)
            if claim is not None:
                _, cancel = await self.db(self.store().heartbeat, [(claim.id, claim.token)], self.lease)
                if run_id in cancel:
                    self.cancel_held(run_id)
        except DatabaseError as exc:  # the next heartbeat decides
            log.debug("could not confirm the cancellation of run %s: %s", run_id, exc)
        finally:
            self.prefetch.doubted.discard(run_id)
            self.start_held()  # not cancelled after all: it may start now (an idle worker has no slot to free)
