"""The completer: writes outcomes in small batches with one token-checked statement.

Outcomes wait in the outbox (a few ms of buffering); while queued or being written their
leases keep being renewed (`held`), so a result computed during an outage is written when
the database is back (or discarded if someone rescued the run meanwhile). A batch that
fails for a reason other than a transient error is written one by one; an outcome the store
refuses for good fails that run with `UnstorableOutcome`. Transient errors keep outcomes
queued and retry with backoff. The writer task is supervised (restarted if it dies).

Starts of held runs (claimed ahead, started here when a slot freed: rota/lifecycle.py) are
written the same way: a run that ends within START_AGE (50 ms) carries its start in its
outcome (`Outcome.started`: no statement, no row version of its own); one still running
after that has its start written by `Store.start`, just before the outcomes. A
start the store refuses (the run's cancellation was requested, or its lease was lost)
goes to `refused`, which checks the run at once (the heartbeat's handling stops it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable

from .. import quarantine
from ..errors import DatabaseError, DatabaseTransient
from ..events import OUTCOME_EVENTS
from ..logs import log_event
from ..serialization import simple_error
from ..stores.base import Claimed, Outcome, Store
from ..stores.records import REFUSED
from .counters import WorkerCounters
from .db import Db
from .outage import Outage
from .service import supervise

log = logging.getLogger("rota.worker")
Emit = Callable[..., None]
# A held run started here has its start written by itself once it has run this long; a
# shorter one's start travels with its outcome (no statement, no row version of its own).
START_AGE = 0.05


class Completer:
    """Owns the outbox and the batch being written."""

    def __init__(
        self, store: Callable[[], Store], db: Db, outage: Outage, counters: WorkerCounters, emit: Emit
    ) -> None:
        self.store = store
        self.db = db
        self.outage = outage
        self.counters = counters
        self.emit = emit
        self.outbox: list[Outcome] = []
        self.writing: list[Outcome] = []  # outcomes being written now (their leases are renewed)
        self.ready = asyncio.Event()
        self.after_outage: Callable[[], Awaitable[None]] = _nothing
        self.sleep_or_stop: Callable[[float], Awaitable[bool]] = _sleep
        # held runs started here whose start is not written yet: run id -> (token, monotonic start)
        self.starts: dict[int, tuple[int, float]] = {}
        self.refused_starts: dict[int, tuple[int, float]] = {}  # refused: carried by the outcome
        self.refused: Callable[[list[tuple[int, int]]], None] = lambda runs: None
        # (run, token) of outcomes whose write raised a transient error: it may have committed
        # with its reply lost, and then the next write finds the run no longer running
        self.uncertain: set[tuple[int, int]] = set()
        self._start_timer: asyncio.TimerHandle | None = None

    def started(self, run_id: int, token: int) -> None:
        """A held run's handler started now: its start is written with its outcome, or by
        the writer once it has run START_AGE seconds (one timer for all of them)."""
        self.starts[run_id] = (token, time.monotonic())
        if self._start_timer is None:
            self._arm_starts()

    def _arm_starts(self) -> None:
        with contextlib.suppress(RuntimeError):  # no running loop: the next flush writes them
            loop = asyncio.get_running_loop()
            self._start_timer = loop.call_later(START_AGE, self._starts_due)

    def _starts_due(self) -> None:
        self._start_timer = None
        self.ready.set()

    def forget(self, run_id: int, token: int | None = None) -> None:
        """The run is no longer ours (lost, handed back): nothing of its start is written.
        With `token`, only that attempt's (a newer attempt of the run keeps its own)."""
        for starts in (self.starts, self.refused_starts):
            entry = starts.get(run_id)
            if entry is not None and (token is None or entry[0] == token):
                del starts[run_id]

    def _take_start(self, run_id: int, token: int) -> tuple[int, float] | None:
        """The unwritten start of this attempt (run id and token), taken off the books."""
        for starts in (self.starts, self.refused_starts):
            entry = starts.get(run_id)
            if entry is not None and entry[0] == token:
                return starts.pop(run_id)
        return None

    def _with_starts(self, batch: list[Outcome]) -> None:
        """Outcomes of runs whose start is not written yet carry it (Outcome.started)."""
        if not self.starts and not self.refused_starts:
            return
        now = time.monotonic()
        for o in batch:
            entry = self._take_start(o.id, o.token)
            if entry is not None:
                o.started = max(0.0, now - entry[1])

    async def write_starts(self) -> None:
        """Write the starts of held runs that have run START_AGE seconds and still run (the
        others' outcomes will likely carry them); raises DatabaseError."""
        now = time.monotonic()
        rows = [(run_id, token, now - t) for run_id, (token, t) in self.starts.items() if now - t >= START_AGE]
        if self.starts and self._start_timer is None:
            self._arm_starts()  # for the younger ones
        if not rows:
            return
        written = await self.db(self.store().start, rows)
        refused: list[tuple[int, int]] = []
        for run_id, token, _ in rows:
            entry = self.starts.get(run_id)
            if entry is not None and entry[0] == token:
                del self.starts[run_id]
                if run_id not in written:  # its outcome records the start: the handler did start
                    self.refused_starts[run_id] = entry
                    refused.append((run_id, token))
        if refused:
            self.refused(refused)

    def put(self, record: Outcome) -> None:
        self.outbox.append(record)
        self.ready.set()

    def held(self) -> list[tuple[int, int]]:
        """(run id, token) of every outcome not written yet: their leases are kept."""
        return [(o.id, o.token) for o in self.outbox] + [(o.id, o.token) for o in self.writing]

    async def run(self, flush: Callable[[], Awaitable[bool]], buffer: Callable[[], float]) -> None:
        """The writer task, supervised: if it ever dies, log why and start it again."""

        async def write() -> None:
            while True:
                await self.ready.wait()
                delay = buffer()
                if delay:
                    await asyncio.sleep(delay)
                self.ready.clear()
                await flush()

        await supervise(write, "the outcome writer", self._requeue, " (queued outcomes are kept)")

    def _requeue(self) -> None:
        self.outbox[:0], self.writing = self.writing, []  # the writer died: even a claimer's batch
        self.ready.set()

    async def wait_idle(self, timeout: float = 5.0) -> None:
        """Let a write in progress finish (shutdown flushes after it)."""
        for _ in range(int(timeout / 0.01)):
            if not self.writing:
                return
            await asyncio.sleep(0.01)

    def take(self) -> list[Outcome]:
        """Move the outbox into `writing` (leases still renewed) and return it."""
        batch, self.outbox = self.outbox, []
        self.writing = self.writing + batch
        return batch

    def _written(self, batch: list[Outcome]) -> None:
        """`batch` is no longer being written (several batches may be at once)."""
        gone = {id(o) for o in batch}
        self.writing = [o for o in self.writing if id(o) not in gone]

    async def flush(self) -> bool:
        """Write what the outbox holds now. False if a transient error kept some back (they
        stay queued, their leases renewed, and are tried again after a backoff)."""
        batch = self.take()
        try:
            self._with_starts(batch)
            if self.starts:
                await self.write_starts()
        except DatabaseTransient as exc:
            self._written(batch)
            return await self._settle(batch, set(), batch, exc)
        if not batch:
            return True
        try:
            written = await self.db(self.store().finish, batch)
            retry: list[Outcome] = []
        except DatabaseTransient as exc:
            written, retry = set(), batch
            self.uncertain.update((o.id, o.token) for o in batch)
            failure: BaseException = exc
        except Exception as exc:  # a permanent error, or a value the driver cannot encode
            written, retry = await self._one_by_one(batch, exc)
            failure = exc
        finally:
            self._written(batch)
        return await self._settle(batch, written, retry, failure if retry else None)

    async def _settle(
        self, batch: list[Outcome], written: set[int], retry: list[Outcome], failure: BaseException | None
    ) -> bool:
        """After a write: requeue what a transient error kept back (after a backoff), or end
        an outage; emit the written outcomes' events, count the stale ones."""
        if retry:
            self.outbox[:0] = retry
            await self.sleep_or_stop(self.outage.failed(failure or DatabaseTransient("write failed")))
            self.ready.set()
        elif self.outage.ok():
            await self.after_outage()
        if self.uncertain:
            written = written | await self._written_before(batch, written, retry)
        self._count_stale(batch, written, retry)
        return not retry

    async def _written_before(self, batch: list[Outcome], written: set[int], retry: list[Outcome]) -> set[int]:
        """The outcomes of `batch` found stale whose earlier write committed though its reply
        was lost: the run's row holds this outcome's status under its token (then its event is
        due, and nothing was discarded)."""
        kept = {o.id for o in retry}
        found: set[int] = set()
        for o in batch:
            if o.id in kept or (o.id, o.token) not in self.uncertain:
                continue
            self.uncertain.discard((o.id, o.token))  # decided now, whichever way
            if o.id in written or o.status not in ("succeeded", "failed"):
                continue
            try:  # (get_run: on PostgreSQL a succeeded run may have moved to rota_history with the write)
                run = await self.db(self.store().get_run, o.id)
            except (DatabaseError, *quarantine.UNDECODABLE):
                continue  # not known: counted stale, as before
            if run is not None and (run.status, run.token) == (o.status, o.token):
                found.add(o.id)
        return found

    async def finish_and_claim(
        self, owner: str, limit: int, queues: list[str] | None, lease: float, start: int | None = None
    ) -> list[Claimed] | None:
        """Write the outbox and claim up to `limit` runs in one transaction (one round trip,
        one commit). A transient error puts the outcomes back in the outbox (the writer tries
        again after its backoff) and is raised: nothing was claimed. After a permanent error
        the outcomes are written one by one and None is returned: the claim did not happen."""
        batch = self.take()
        self._with_starts(batch)
        try:
            written, claimed = await self.db(self.store().finish_and_claim, batch, owner, limit, queues, lease, start)
        except DatabaseTransient:
            self._written(batch)
            self.uncertain.update((o.id, o.token) for o in batch)
            self.outbox[:0] = batch
            self.ready.set()
            raise
        except Exception as exc:
            try:
                written, retry = await self._one_by_one(batch, exc)
            finally:
                self._written(batch)
            await self._settle(batch, written, retry, exc)
            return None
        self._written(batch)
        self.counters.written_with_claims += len(batch)
        await self._settle(batch, written, [], None)
        return claimed

    def announce(self, outcome: Outcome) -> None:
        """An outcome already written by someone else (a transactional handler's commit):
        only its event is due (the commit recorded the run's start too)."""
        self._take_start(outcome.id, outcome.token)
        self.emit(OUTCOME_EVENTS[outcome.status], run_id=outcome.id)

    def _count_stale(self, batch: list[Outcome], written: set[int], retry: list[Outcome]) -> None:
        kept = {o.id for o in retry}
        for o in batch:
            if o.id in written:
                status = self._refused(o) if o.status == REFUSED else o.status
                if status in OUTCOME_EVENTS:  # (a refused run given back, pending again: no event)
                    self.emit(OUTCOME_EVENTS[status], run_id=o.id)
            elif o.id not in kept:
                self.counters.stale_writes += 1
                log.warning(
                    "run %s: outcome %r discarded: token %s no longer holds the run (its lease was lost and it was rescued, or the run is gone)",
                    o.id,
                    o.status,
                    o.token,
                )

    def _refused(self, o: Outcome) -> str:
        """What the store made of a refused run: given back (REFUSED), or ended: failed (refused
        for longer than UNKNOWN_TASK_GRACE) or cancelled (its cancellation was requested)."""
        status = o.written_status if o.written_status in ("failed", "cancelled") else REFUSED
        if status == "failed":
            self.counters.failed += 1
            log_event(log, logging.WARNING, "run_failed", f"run {o.id} failed: {_message(o.error)}", run_id=str(o.id))
        elif status == "cancelled":
            self.counters.cancelled += 1
            log_event(log, logging.INFO, "run_cancelled", f"run {o.id} cancelled on request", run_id=str(o.id))
        return status

    async def _one_by_one(self, batch: list[Outcome], exc: BaseException) -> tuple[set[int], list[Outcome]]:
        """After a batch failed for a reason other than a transient error: write each outcome
        on its own, so one bad value cannot hold back the others. Returns (written, to retry)."""
        log.error("writing %d outcomes failed (%s); writing them one by one", len(batch), exc)
        written: set[int] = set()
        retry: list[Outcome] = []
        for o in batch:
            try:
                written |= await self.db(self.store().finish, [o])
            except DatabaseTransient:
                retry.append(o)
            except Exception as one:
                written |= await self._unstorable(o, one, retry)
        return written, retry

    async def _unstorable(self, o: Outcome, exc: BaseException, retry: list[Outcome]) -> set[int]:
        """The store refused this outcome's values for good: record the run failed, saying why."""
        message = f"run {o.id}: its {o.status} outcome could not be stored ({type(exc).__name__}: {exc})"
        log.error("%s; recording the run as failed", message)
        failed = Outcome(o.id, o.token, "failed", error=simple_error("UnstorableOutcome", message), started=o.started)
        try:
            return await self.db(self.store().finish, [failed])
        except DatabaseTransient:
            retry.append(failed)
        except Exception as again:
            log.error("run %s: could not record that failure either (%s); it will be rescued", o.id, again)
            return {o.id}  # not stale: nothing more this worker can do
        return set()


async def _nothing() -> None:
    return None


async def _sleep(delay: float) -> bool:
    await asyncio.sleep(delay)
    return False


def _message(error: str | None) -> str:
    """The message of a stored error JSON (empty if none)."""
    try:
        return str(json.loads(error or "{}").get("message", ""))
    except ValueError:
        return ""
