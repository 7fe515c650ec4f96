"""Claims and dispatch (the producer): claim up to the free slots when a run is due, start
each claimed run on its executor, and turn each run's end into a queued outcome."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from ..errors import DatabaseError
from ..logs import log_event
from ..stores.base import Claimed, Store, finishes_with_claims
from ..tasks import Task
from ..tracing import end_attempt
from ..transactional import COMMITTED
from .active import Active
from .completer import Completer
from .counters import WorkerCounters
from .db import Db
from .executors import Executors
from .outcomes import Decider, set_aside
from .prefetch import Prefetch
from .service import wait_event
from .wakeups import EARLY, DueTimes

log = logging.getLogger("rota.worker")
CHECK = 0.01  # while runs are held and no slot frees: look at the handlers' pace this often
LIMIT_GATHER = 0.001  # a run of ours ended while limited runs wait: claim again this soon
Observer = Callable[[str, Claimed, float], None]


def tell(observers: list[Observer], event: str, claim: Claimed, failed: list[Observer]) -> None:
    """Call each observer (Worker.observe: user code too). One that raises is logged, with
    its traceback the first time only (`failed`: the worker's observers that raised once),
    and never stops a run's start or its outcome."""
    if not observers:  # (the hot path: most workers have none)
        return
    at = time.time()
    for observe in observers:
        try:
            observe(event, claim, at)
        except Exception:
            first = not any(observe is f for f in failed)
            if first:
                failed.append(observe)
            log.log(logging.ERROR if first else logging.DEBUG, "run observer %r raised on %s of run %d",
                    observe, event, claim.id, exc_info=first)  # fmt: skip


class Claimer:
    """Claims due runs into free slots and hands them to the executors."""

    def __init__(
        self,
        worker: str,
        store: Callable[[], Store],
        db: Db,
        due: DueTimes,
        executors: Executors,
        counters: WorkerCounters,
        tasks: Mapping[str, Task[Any, Any]],
        completer: Completer,
    ) -> None:
        self.worker = worker
        self.completer = completer
        self.prefetch = Prefetch(0)
        self.store = store
        self.db = db
        self.due = due
        self.executors = executors
        self.counters = counters
        self.tasks = tasks
        self.queues: list[str] | None = None
        self.lease = 0.0
        self.observers: list[Observer] = []
        self.failed_observers: list[Observer] = []  # those that raised once (later failures: debug only)
        self._trim_after = 0.0  # no hand-back before (one failed: the database is away)
        self.reserved = 0  # free slots kept for the runs a claim in flight starts
        self._limit_wake: asyncio.TimerHandle | None = None
        self._ahead_timer: asyncio.Handle | None = None  # the next run claimed ahead is due
        self.superseded: Callable[[Active], None] = lambda active: None  # Leases.lost (the worker sets it)
        self._superseding = False  # dispatch is retiring an older attempt: start_held waits
        self.holding: Callable[[], list[tuple[int, int]]] = list  # Leases.holding (the worker sets it)
        self.unsure = False  # a claim raised: it may have committed, its reply lost (reconcile)

    async def claim_some(self) -> tuple[int, int]:
        """Claim up to the free slots, plus the prefetch room, if a run is due; start what
        fits in the free slots and hold the rest. Returns (claimed, asked)."""
        self.start_held()
        if self.unsure:
            await self.reconcile()
        want = self.wanted()
        if want <= 0:
            return 0, 0
        if not self.due.due(self.due.run_due):
            return await self.claim_ahead()
        deadline = time.monotonic() + self.lease
        # started by the claim itself (the free slots but those kept for runs claimed ahead
        # of their due time); the rest are held
        start = max(0, self.executors.free_slots - len(self.prefetch.not_before))
        self.reserved = start
        self.unsure = True  # (until its reply came: see reconcile)
        try:
            claimed = await self._claim(want, start)
        finally:
            self.reserved = 0
        self.unsure = False
        self.counters.claimed += len(claimed)
        if claimed:
            self.due.claimed_at = time.monotonic()
        if len(claimed) < want and self.store().claim_cut_short():
            want = len(claimed)  # more are due (a claim takes so many limit keys at most): a backlog
        if len(claimed) < want:
            self.due.run_due = None
        # a backlog to hold runs ahead from, unless only runs waiting for a limit's slot are
        # due: a claim before a slot frees would find nothing (a round trip for nothing)
        self.prefetch.backlog = len(claimed) == want and not self.store().limits_full()
        claimed = self.set_aside(claimed)
        self.prefetch.hold_all([c for c in claimed if c.held], deadline)  # in start order
        for c in claimed:
            if not c.held:
                self.dispatch(c)  # started by the claim itself
        self.start_held()
        return len(claimed), want

    async def claim_ahead(self) -> tuple[int, int]:
        """Just before the next run is due (within CLAIM_AHEAD), with free slots and nothing
        held: claim the runs due by then, held, each to start at its due time on this clock
        (the claim's round trip is then not in its start: a tick starts on time). Returns
        (claimed, asked) when it took some but fewer than asked (every run due in the window:
        the poller learns the next due time), else (0, 0): a claim at the due time takes the
        rest (or the limited runs, which are not claimed ahead)."""
        due = self.due
        if not due.ahead_due():
            return 0, 0
        free = self.executors.free_slots
        if free <= 0 or self.prefetch.held or not self.prefetch.claiming():
            due.ahead_upto = max(due.ahead_upto, due.run_due or 0.0)  # claimed at its due time instead
            return 0, 0
        sent = time.monotonic()
        due.ahead_upto = sent + due.claim_ahead  # (the database's window ends a little later)
        self.unsure = True
        claimed = await self.db(self.store().claim_ahead, self.worker, free, self.queues, self.lease, due.claim_ahead)
        self.unsure = False
        if not claimed:
            return 0, 0
        self.counters.claimed += len(claimed)
        self.counters.claimed_ahead += len(claimed)
        due.claimed_at = time.monotonic()
        asked, claimed = len(claimed), self.set_aside(claimed)
        self.prefetch.hold_ahead(claimed, sent + self.lease, {c.id: self._start_time(c, sent) for c in claimed})
        self._ahead_due()
        return (asked, free) if asked < free else (0, 0)

    async def reconcile(self) -> None:
        """After a claim that raised, before anything else is claimed: its transaction may
        have committed with its reply lost (the connection cut just then), leaving runs
        claimed for this worker that it does not know of. They are given back as they were
        before that claim (Store.disown: the runs this worker owns under a token it does not
        hold; no handler ran, so no attempt and no rate start stay counted), rather than
        left to the rescue a lease later as a lost worker's. Claims are made by the poll loop
        alone, one at a time, so no claim is in flight meanwhile. Raises DatabaseError (the
        next pass tries again)."""
        if not self.unsure:
            return
        tokens = [token for _, token in self.holding()]
        back = await self.db(self.store().disown, self.worker, tokens)
        self.unsure = False
        if back:
            ids = sorted(run_id for run_id, _ in back)
            message = (
                f"a claim's reply was lost (its connection failed after the commit): {len(ids)} run(s) given back {ids}"
            )
            log_event(log, logging.WARNING, "claim_reply_lost", message, worker=self.worker, runs=ids)

    def set_aside(self, claimed: list[Claimed]) -> list[Claimed]:
        """The claimed runs but the damaged ones (rota.quarantine), which fail at once as
        damaged, without running (their outcomes written with the others')."""
        if not any(c.damaged for c in claimed):  # (the hot path: a list scan, nothing else)
            return claimed
        for c in claimed:
            if c.damaged:
                self.completer.put(set_aside(c, c.damaged, self.counters))
        return [c for c in claimed if not c.damaged]

    def _start_time(self, claim: Claimed, sent: float) -> float:
        """When a run claimed ahead starts (monotonic): its due time on the database clock
        as this process knows it, never before `sent` plus the time from the claim's
        database now to its due time (the claim ran after it was sent: so no clock
        estimate can make it start early by more than the send's delay), nor later than
        twice the window after the reply."""
        db_now = claim.lease_until.timestamp() - self.lease  # the claim set lease_until = now + lease
        floor = sent + (claim.due - db_now)
        return max(floor, min(self.due.mono_of(claim.due), self.due.claimed_at + 2 * self.due.claim_ahead))

    def _ahead_due(self) -> None:
        """Start the runs claimed ahead whose time came (if a slot is free; else the next
        slot to free starts them), and wake again for the next one: by a timer EARLY
        before it, then stepping the loop up to it (see rota.worker.wakeups.EARLY)."""
        if self._ahead_timer is not None:
            self._ahead_timer.cancel()
            self._ahead_timer = None
        now = time.monotonic()  # one reading for both: a run due between two would wait for a slot's end
        self.start_held(now)
        at = self.prefetch.next_ahead(now)
        if at is None or not self.prefetch.claiming():
            return
        loop = asyncio.get_running_loop()
        if at - now > EARLY:
            self._ahead_timer = loop.call_later(at - now - EARLY, self._ahead_due)
        else:
            self._ahead_timer = loop.call_soon(self._ahead_due)

    def limit_slot_freed(self) -> None:
        """A run of ours ended while due limited runs wait for a slot: claim again within
        LIMIT_GATHER (the handlers ending meanwhile join the same claim), taking the
        outcomes along (their slots are freed in the claim's own transaction)."""
        if self._limit_wake is None:
            loop = asyncio.get_running_loop()
            self._limit_wake = loop.call_later(LIMIT_GATHER, self._limit_wake_due)

    def _limit_wake_due(self) -> None:
        self._limit_wake = None
        self.due.run_now()

    def wanted(self) -> int:
        """How many runs a claim may ask for now: the free slots and the prefetch room."""
        return self.executors.free_slots + self.prefetch.room()

    def start_held(self, now: float | None = None) -> None:
        """Start held runs in the free slots (on the loop, no round trip); none once the
        worker stops claiming (shutdown hands them back). Each starts here: its attempt
        counts from now, and its start is written with the worker's next write. `now`
        (monotonic): the time the held runs' due times are compared with."""
        while self.executors.free_slots > self.reserved and not self._superseding:
            claim = self.prefetch.next(now)
            if claim is None:
                return
            claim.attempt += 1
            claim.started_at = datetime.now(UTC)
            self.completer.started(claim.id, claim.token)
            self.dispatch(claim)

    async def _claim(self, limit: int, start: int) -> list[Claimed]:
        """Claim; while runs are claimed ahead, take the outcomes waiting in the outbox
        along in the same transaction when the store can (one round trip and one commit for
        a finished batch and the next). Not otherwise: with no held runs to keep the slots
        busy, slots would wait for the outcomes' writes too (measured: slower on PostgreSQL
        than a claim alone with the outcomes written beside it)."""
        store = self.store()
        along = self.prefetch.active() or store.limits_due()  # the outcomes free slots of limits
        if self.completer.outbox and along and finishes_with_claims(store):
            claimed = await self.completer.finish_and_claim(self.worker, limit, self.queues, self.lease, start)
            if claimed is not None:
                return claimed
        return await self.db(store.claim, self.worker, limit, self.queues, self.lease, start)

    def dispatch(self, claim: Claimed) -> None:
        older = self.executors.inflight.get(claim.id)
        if older is not None and older.claim.token != claim.token:
            # We claimed this run again: our older attempt's lease ran out and the run was
            # rescued (a pause, a blocked loop) before our heartbeat noticed. That attempt is
            # lost: stopped and its result discarded, before the new one takes the slot. The
            # slot it frees (at once for a coroutine or a child process) is this one's: no
            # held run may start in it meanwhile.
            self._superseding = True
            try:
                self.superseded(older)
            finally:
                self._superseding = False
        self.counters.dispatched += 1
        if log.isEnabledFor(logging.DEBUG):
            self._log_claimed(claim)
        task = self.tasks.get(claim.task)
        if task is not None:  # (a run of a task not registered here is given back: it starts nothing)
            tell(self.observers, "started", claim, self.failed_observers)
        self.executors.submit(claim, task)

    def _log_claimed(self, claim: Claimed) -> None:
        log_event(
            log,
            logging.DEBUG,
            "run_claimed",
            f"run {claim.id} {claim.task} claimed (attempt {claim.attempt}/{claim.max_attempts})",
            run_id=str(claim.id),
            task=claim.task,
            schedule=claim.schedule,
            attempt=claim.attempt,
            worker=self.worker,
        )

    def next_batch(self, slots: int) -> tuple[int, float]:
        """In a backlog: how many runs the next claim should wait for, and how long at most.
        Without prefetch, `slots` free slots or 2 ms (a slot must not idle for long); with
        it, half the prefetch room: the held runs keep the slots busy meanwhile, and a
        bigger batch costs fewer statements per run."""
        if self.prefetch.active():
            return max(1, (self.prefetch.size() + 1) // 2), 0.05
        return slots, 0.002

    async def gather_slots(self, want: int, max_wait: float) -> None:
        """Backlog: wait (briefly) until a batch of slots (or prefetch room) is free, to
        claim many at once."""
        deadline = time.monotonic() + max_wait
        slot_freed = self.executors.slot_freed
        while self.wanted() < want:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            slot_freed.clear()
            await self._wait_slot(remaining)

    async def wait_for_slots(self, deadline: float) -> None:
        """Until a slot frees or `deadline` (the next poll)."""
        slot_freed = self.executors.slot_freed
        slot_freed.clear()
        while self.wanted() <= 0 and not slot_freed.is_set():
            remaining = self.due.until(deadline)
            if remaining <= 0 or await self._wait_slot(remaining):
                return

    async def _wait_slot(self, timeout: float) -> bool:
        """Wait for slot_freed, at most `timeout`. While runs are (or may be) held, look every CHECK
        seconds: at the pace (hand back what it would not start soon: trim), and for a
        wake-up (a run enqueued meanwhile may go ahead of the held ones: claim it, if the
        horizon has room, into start order). True to claim now."""
        slot_freed = self.executors.slot_freed
        if not self.prefetch.held and not self.prefetch.size():
            await wait_event(slot_freed, timeout)
            return False
        await wait_event(slot_freed, min(timeout, CHECK))
        if slot_freed.is_set():
            return False
        await self.trim()
        if not self.due.wake.is_set():
            return False
        self.due.wake.clear()
        # (not while only runs waiting for a limit's slot were due: the wake-up may be this
        # worker's own run ending, whose slot its next claim takes with the outcome)
        self.prefetch.backlog = not self.store().limits_full()
        return self.wanted() > 0

    async def trim(self) -> None:
        """Hand back the held runs the handlers' current pace would not start within the
        hold horizon (they turned slow): another worker may have free slots for them now."""
        if time.monotonic() < self._trim_after:
            return
        extra = self.prefetch.take_excess()
        if not extra:
            return
        held = [(claim.id, claim.token) for claim, _ in extra]
        reason = f"worker {self.worker} held it ahead, then its handlers ran slower: handed back for another worker"
        try:
            back = await self.db(self.store().hand_back, held, reason)
        except DatabaseError as exc:
            self.prefetch.rehold(extra)  # still ours: kept, renewed, started or handed back later
            self._trim_after = time.monotonic() + 1.0  # the database is away: not every CHECK
            log.debug("could not hand back %d run(s) held ahead: %s", len(held), exc)
            return
        log.debug("handed back %d run(s) held ahead (handlers slowed down): %s", len(back), sorted(back))

    async def sleep_until(self, deadline: float) -> None:
        """Until the next poll, the next due run, or a wake-up."""
        self.due.wake.clear()
        await wait_event(self.due.wake, self.due.until(deadline, self.due.run_due))


class Finisher:
    """The end of each run: free its slot, decide its outcome, log it, queue it."""

    def __init__(self, executors: Executors, decider: Decider, completer: Completer, claimer: Claimer) -> None:
        self.executors = executors
        self.decider = decider
        self.completer = completer
        self.claimer = claimer

    def complete(self, active: Active, outcome: tuple[str, Any]) -> None:
        """The attempt ended (or was given up): free its slot, start a held run in it, and
        queue its outcome (and claim again at once while due limited runs wait for a slot)."""
        if not self.executors.finish(active):
            return
        kind, value = outcome
        if kind != "unknown":  # (a run of a task not registered here ran nothing: no pace, no observers)
            self.claimer.prefetch.ran(time.monotonic() - active.started)
        self.claimer.start_held()
        if self.claimer.store().limits_wait():  # its outcome frees a slot of a full limit:
            self.claimer.limit_slot_freed()  # claim again now (taking it along), not at a poll
        if kind == "lost":
            if active.trace is not None:
                end_attempt(active.trace, "lost")
                active.trace = None
            self.completer.forget(active.claim.id, active.claim.token)
            return
        record = self.decider.decide(active, kind, value)
        self.decider.log(active, kind, record)
        if kind != "unknown":
            tell(self.claimer.observers, record.status, active.claim, self.claimer.failed_observers)
        if kind == COMMITTED:  # written with the handler's own transaction
            self.completer.announce(record)
            return
        self.completer.put(record)


async def wait_all(executors: Executors, step: float = 0.05) -> None:
    """Until no run is in flight (run_until_idle)."""
    while executors.inflight:
        executors.slot_freed.clear()
        await wait_event(executors.slot_freed, step)
