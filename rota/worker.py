"""The worker: claims due runs, executes them, keeps their leases alive, writes outcomes.

Design notes
------------
Terms. A worker (`host:pid`) *claims* a run: the store gives it a fencing *token* and a
*lease* that ends `lease` seconds later on the database clock. While the run executes, the
heartbeat loop renews the leases of every run the worker holds (every `lease / 3` s), and the
same statement tells it which runs were lost (token no longer matches: rescued by someone
else) and which were asked to stop. Liveness is separate from runtime: a run may take hours
as long as its worker is alive; a task's own limit is its `timeout`.

Rescue. Every housekeeping pass (once per poll interval) of every worker runs one cheap
query for runs whose lease has expired: a worker that died (kill -9, power loss, a paused VM)
stops heartbeating, and any other worker retries its runs (or fails them when no attempt is
left) within a lease plus a poll interval. There is no leader.

The loop is never blocked by a job. `async def` handlers run as tasks on this event loop;
plain `def` handlers run on daemon threads; isolated handlers in child processes. Store
calls run on their own small thread pool. A job's slot is freed when it ends, times out or
loses its lease; a late result from a fenced-off attempt is discarded, never written.

Outcomes are written in small batches (a few ms of buffering) with one token-checked
statement; their leases keep being renewed until they are written (also while a batch is
being written), so a result computed during a database outage is written when the database
is back (or, if someone rescued the run meanwhile, discarded and the run retried). Every
outcome is handled on its own: a batch that fails for a reason other than a transient error
is written one by one, and an outcome the store refuses for good fails that run with an
`UnstorableOutcome` error. Transient errors (DatabaseTransient: locked, read-only, deadlock,
serialization failure, connection reset) keep the outcomes queued and retry with backoff;
only a token that no longer matches discards one. The writer task is supervised.

Outages and the rescue rule (rota.resilience.Outage). After a database error the poll loop
first renews this worker's own leases (the heartbeat statement is token-checked and ignores
`lease_until`: a run is ours while nobody else took it) and writes its queued outcomes;
only then does it poll, claim or rescue. Rescue waits until (a) this worker's calls work,
(b) one lease has passed since its last outage ended, and (c) on PostgreSQL the server has
been up for one lease (`pg_postmaster_start_time()`). So when the database was down for
everybody (restart, failover, SQLite locked past the busy timeout), every owner gets a whole
lease of working database to renew before its runs can be rescued; reconnect backoff is
capped at the heartbeat interval so a live owner comes back within it. A worker cut off
alone (partition) is rescued by the others, who saw no outage, once its lease expires.

Slots. Concurrency is a hard cap on running handler bodies: a sync handler past its
timeout, or whose lease was lost, keeps its slot until its thread returns (counted in
`stuck`, written to the worker registry); process isolation kills the child and frees it.
Schedule ticks are materialized in their own task, so a tick insert waiting on a row lock
never holds up claims or rescue. A loop watchdog names an `async def` handler that blocks
the event loop.

Shutdown: stop claiming, drain up to `shutdown_timeout`, hand unfinished runs back (pending
again at once, the attempt not counted), flush outcomes, release this process's named locks,
mark the worker stopped. A second signal skips the drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from . import timing
from .errors import (
    Cancelled,
    ConfigurationError,
    DatabaseError,
    DatabaseTransient,
    DatabaseUnavailable,
    SchemaVersionError,
)
from .events import OUTCOME_EVENTS
from .executor import DaemonPool, handler_path, run_in_child
from .resilience import LoopWatch, Outage
from .serialization import encode, encode_error, encode_result, error_payload, simple_error, storable
from .stores.base import Claimed, DueSchedule, Materialization, Outcome, Store
from .tasks import Backoff, RunContext, Task

if TYPE_CHECKING:
    from .app import App

log = logging.getLogger("rota.worker")
T = TypeVar("T")

_worker_seq = 0
_worker_seq_lock = threading.Lock()


def worker_identity() -> str:
    """host:pid, with :n appended for the second and later worker of one process."""
    global _worker_seq
    with _worker_seq_lock:
        _worker_seq += 1
        n = _worker_seq
    base = f"{socket.gethostname()}:{os.getpid()}"
    return base if n == 1 else f"{base}:{n}"


class _Active:
    """A run this worker holds. Kept small: one is made per run on the hot path."""

    __slots__ = ("_cancel", "async_task", "cancel_requested", "claim", "done", "stuck", "task", "timer")

    def __init__(self, claim: Claimed, task: Task[Any, Any] | None) -> None:
        self.claim = claim
        self.task = task
        self._cancel: threading.Event | None = None
        self.cancel_requested = False
        self.done = False  # its outcome is decided; whatever the handler does later is ignored
        self.stuck = False  # done, but its thread still runs the handler (it keeps its slot)
        self.async_task: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None

    @property
    def cancel(self) -> threading.Event:
        """Set when the run should stop (made on first use: most runs never need it)."""
        if self._cancel is None:
            self._cancel = threading.Event()
        return self._cancel


class CorruptArguments(ValueError):
    """A claimed run's stored args/kwargs are not valid JSON (a damaged or hand-written row)."""


def _decode_arguments(c: Claimed) -> tuple[Any, Any]:
    try:
        return json.loads(c.args), json.loads(c.kwargs)
    except ValueError as exc:
        raise CorruptArguments(f"stored arguments are not valid JSON ({exc}); run {c.id} is not retried") from None


@dataclass(slots=True)
class WorkerCounters:
    """Totals since start; the per-poll log line and /metrics read these."""

    polls: int = 0
    rescued: int = 0
    claimed: int = 0
    dispatched: int = 0
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    cancelled: int = 0
    timed_out: int = 0
    lost: int = 0
    stale_writes: int = 0
    skipped_at_capacity: int = 0
    locked_out: int = 0
    ticks: int = 0
    pruned: int = 0

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


class Worker:
    """Runs the tasks of one App. Create with `app.worker(...)`; `await run()` or `start()`."""

    def __init__(
        self,
        app: App,
        *,
        concurrency: int | None = None,
        queues: list[str] | tuple[str, ...] | None = None,
        lease: float | None = None,
        poll_interval: float | None = None,
        shutdown_timeout: float | None = None,
        heartbeat_interval: float | None = None,
        flush_interval: float = 0.002,
        install_signal_handlers: bool = True,
        metrics_port: int | None = None,
    ) -> None:
        self.app = app
        self.concurrency = _positive_int("concurrency", concurrency if concurrency is not None else app.concurrency)
        self.queues = list(queues) if queues else None
        self.lease = _positive("lease", lease if lease is not None else app.lease)
        self.poll_interval = _positive(
            "poll_interval", poll_interval if poll_interval is not None else app.poll_interval
        )
        self.shutdown_timeout = _non_negative(
            "shutdown_timeout",
            shutdown_timeout if shutdown_timeout is not None else app.shutdown_timeout,
        )
        self.heartbeat_interval = _positive(
            "heartbeat_interval",
            heartbeat_interval if heartbeat_interval is not None else self.lease / 3,
        )
        if self.heartbeat_interval >= self.lease:
            raise ConfigurationError(
                f"heartbeat_interval ({self.heartbeat_interval} s) must be shorter than the lease ({self.lease} s)"
            )
        self.flush_interval = flush_interval
        self.install_signal_handlers = install_signal_handlers
        self.metrics_port = metrics_port
        self.id = worker_identity()
        self.counters = WorkerCounters()
        self.state = "starting"
        self.inflight: dict[int, _Active] = {}
        self._outbox: list[Outcome] = []
        self._done: deque[tuple[_Active, tuple[str, Any]]] = deque()
        self._done_scheduled = False
        self._threads = DaemonPool(self.concurrency * 2 + 4, "rota-run")
        self._db_pool = DaemonPool(4, "rota-db")
        self._init_fault_state()
        self._triggers: dict[tuple[str | None, float | None, str], timing.Trigger] = {}
        self._bad_schedules: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._claiming = True
        self._force = False
        self._stopped = threading.Event()
        self._next_run_due: float | None = None  # monotonic
        self._claimed_at = 0.0  # monotonic time of the last claim that found runs
        self._next_schedule_due: float | None = None  # monotonic
        self._observers: list[Callable[[str, Claimed, float], None]] = []

    def _init_fault_state(self) -> None:
        self._stuck = 0  # threads still running handlers whose outcome is already decided
        self._writing: list[Outcome] = []  # outcomes being written now (their leases are renewed)
        self._db_offset = timedelta(0)  # database clock minus local clock
        self._loop_watch = LoopWatch()
        self._tick_wake = asyncio.Event()
        self._outage = Outage(self.lease, min(10.0, self.heartbeat_interval))

    # -- public control ------------------------------------------------------------------
    @property
    def store(self) -> Store:
        return self.app.store

    @property
    def free_slots(self) -> int:
        """Slots free for new runs: a timed-out or fenced-off thread keeps its slot until
        its handler really returns (concurrency is a hard cap on running handler bodies)."""
        return max(0, self.concurrency - len(self.inflight) - self._stuck)

    @property
    def stuck(self) -> int:
        """Handler threads still running after their run timed out or lost its lease."""
        return self._stuck

    def stop(self, wait: bool = True, timeout: float | None = None) -> bool:
        """Ask the worker to stop (thread-safe). With wait, block until it has stopped (or
        `timeout` passed); returns whether it has stopped."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._begin_stop)
        if wait:
            return self._stopped.wait(timeout)
        return self._stopped.is_set()

    def start(self) -> threading.Thread:
        """Run the worker on a background thread with its own event loop (for embedding)."""
        self.install_signal_handlers = False
        started = threading.Event()

        def main() -> None:
            async def runner() -> None:
                started.set()
                await self.run()

            asyncio.run(runner())

        thread = threading.Thread(target=main, name=f"rota-worker-{self.id}", daemon=True)
        thread.start()
        started.wait()
        return thread

    # -- the main coroutine ----------------------------------------------------------------
    async def run(self) -> None:
        """Run until stopped (SIGTERM/SIGINT, `stop()`), then shut down gracefully."""
        self._bind_loop()
        self._install_signals()
        try:
            if not await self._start():
                return
            background = [
                asyncio.create_task(self._poll_loop(), name="rota-poll"),
                asyncio.create_task(self._heartbeat_loop(), name="rota-heartbeat"),
                asyncio.create_task(self._completer(), name="rota-completer"),
                asyncio.create_task(self._tick_loop(), name="rota-ticks"),
                asyncio.create_task(self._loop_watch.run(self._describe_task), name="rota-loopwatch"),
                asyncio.create_task(self._listen(), name="rota-listen"),
                asyncio.create_task(self._maintenance_loop(), name="rota-maintenance"),
            ]
            if self.metrics_port is not None:
                from .metrics import serve_worker_metrics

                serve_worker_metrics(self, self.metrics_port)
            await self._stop_requested.wait()
            await self._shutdown(background)
        finally:
            self._remove_signals()
            self._threads.close()
            self._db_pool.close()
            self._stopped.set()

    def _bind_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._outbox_ready = asyncio.Event()
        self._tick_wake = asyncio.Event()
        self._stop_requested = asyncio.Event()

    async def run_until_idle(self) -> int:
        """Process what is due now, then return the number of runs executed: materialize due
        schedule ticks, claim and execute due runs, write their outcomes, repeat until
        nothing is due. No signals, heartbeats or sleeping; for tests (see rota.testing)."""
        self._bind_loop()
        await self._db(self.app.prepare)
        await self._learn_db_started()
        executed = 0
        try:
            while True:
                await self._housekeeping()
                self._next_run_due = time.monotonic()
                claimed, _ = await self._claim_some()
                executed += claimed
                while self.inflight:
                    self._slot_freed.clear()
                    await self._wait_event(self._slot_freed, 0.05)
                await self._flush()
                if claimed == 0:
                    return executed
        finally:
            self._threads.close()
            self._db_pool.close()
            self._threads = DaemonPool(self.concurrency * 2 + 4, "rota-run")
            self._db_pool = DaemonPool(4, "rota-db")

    async def _start(self) -> bool:
        """Open the store (retrying while the database is unreachable), register, sync schedules."""
        self.app._adopt_worker(self)
        while True:
            try:
                await self._db(self.app.prepare)
                await self._db(
                    self.store.register_worker,
                    self.id,
                    socket.gethostname(),
                    os.getpid(),
                    self.concurrency,
                    self.queues,
                )
                self._outage.ok()
                await self._learn_db_started()
                break
            except SchemaVersionError:
                raise
            except DatabaseUnavailable as exc:
                delay = self._outage.failed(exc)
                if await self._sleep_or_stop(delay):
                    return False
        await self._warn_about_schedules()
        self.state = "running"
        self._emit("worker_started")
        log.info(
            "worker %s started: concurrency %d, queues %s, lease %.1f s, %d task(s), %d schedule(s), database %s",
            self.id,
            self.concurrency,
            ",".join(self.queues) if self.queues else "all",
            self.lease,
            len(self.app.tasks),
            len(self.app.schedules),
            self.app.database_label,
        )
        return True

    async def _warn_about_schedules(self) -> None:
        """One warning per schedule (from code or stored) that fires more often than we poll."""
        try:
            stored = await self._db(self.store.list_schedules)
        except DatabaseError:
            stored = []
        intervals = {spec.name: spec.every for spec in self.app.schedules.values()}
        intervals.update({info.name: info.every for info in stored if not info.paused})
        for name, every in sorted(intervals.items()):
            if every is not None and every.total_seconds() < self.poll_interval:
                log.warning(
                    "schedule %r fires every %.3g s, more often than this worker polls (every %.3g s): "
                    "ticks may run late or be coalesced; lower poll_interval to honour it",
                    name,
                    every.total_seconds(),
                    self.poll_interval,
                )

    # -- the poll loop -------------------------------------------------------------------
    async def _poll_loop(self) -> None:
        housekeeping_at = 0.0
        while self._claiming:
            try:
                if self._outage.since is not None:
                    await self._reconnect()  # renew our leases and write our outcomes first
                if time.monotonic() >= housekeeping_at:
                    await self._poll_and_rescue()
                    housekeeping_at = time.monotonic() + self.poll_interval
                claimed, asked = await self._claim_some()
            except DatabaseError as exc:
                if not self._claiming:
                    break
                await self._sleep_or_wake(self._outage.failed(exc))
                continue
            if not self._claiming:
                break
            if asked and claimed == asked:
                # Backlog: claim again once a batch of slots is free (or very soon), so that
                # one round trip claims many runs rather than one per finished handler.
                await self._gather_slots(max(1, self.concurrency // 2), 0.002)
                if self._claimable() <= 0:
                    await self._wait_for_slots(housekeeping_at)
                continue
            if asked and claimed < asked:
                # Drained what is due: learn when the next run is due before sleeping.
                await self._refresh_due()
            if self._claimable() <= 0:
                self.counters.skipped_at_capacity += 1
                await self._wait_for_slots(housekeeping_at)
            else:
                await self._sleep_until(housekeeping_at)

    def _due(self, at: float | None) -> bool:
        return at is not None and time.monotonic() >= at

    async def _housekeeping(self) -> None:
        """One whole pass: learn what is due, rescue, materialize due schedule ticks (the
        poll loop leaves the ticks to their own task; run_until_idle does it all here)."""
        await self._poll_and_rescue()
        await self._ticks()

    async def _poll_and_rescue(self) -> None:
        """Learn what is due; rescue expired leases when the rescue rule allows it."""
        self.counters.polls += 1
        state = await self._db(self.store.poll_state, self.queues)
        self._set_due(state.now, state.next_run_due, state.next_schedule_due)
        if self._due(self._next_schedule_due):
            self._tick_wake.set()
        if not self._outage.may_rescue(state.now):
            return
        rescued = await self._db(self.store.rescue, 100)
        for r in rescued:
            self.counters.rescued += 1
            log.warning(
                "rescued run %s (%s) from a lost worker: %s; now %s",
                r.id,
                r.task,
                r.message,
                r.status,
            )
            self._emit("run_rescued", run_id=r.id, detail=r.message)
            if r.status in OUTCOME_EVENTS:
                self._emit(OUTCOME_EVENTS[r.status], run_id=r.id, detail=r.message)

    async def _tick_loop(self) -> None:
        """Materialize schedule ticks in their own task: a tick insert that waits on a row
        lock (another host frozen mid-transaction) never holds up claims and rescue."""
        while self._claiming:
            deadline = time.monotonic() + self.poll_interval
            await self._wait_event(self._tick_wake, self._until(deadline, self._next_schedule_due))
            self._tick_wake.clear()
            if not self._claiming or not self._due(self._next_schedule_due):
                continue
            try:
                if await self._ticks():
                    self._wake.set()  # the poll loop claims the runs just made
            except DatabaseError as exc:
                await self._sleep_or_stop(self._outage.failed(exc))

    async def _ticks(self) -> bool:
        """Materialize the schedule ticks due now (the database's now); True if a run may
        have become due."""
        state = await self._db(self.store.poll_state, self.queues)
        if state.next_schedule_due is None or state.next_schedule_due > state.now:
            self._set_due(state.now, state.next_run_due, state.next_schedule_due)
            return False
        planned_at = state.now
        woke, more = await self._materialize(state.now)
        state = await self._db(self.store.poll_state, self.queues)
        self._set_due(state.now, state.next_run_due, state.next_schedule_due)
        if woke:
            self._next_run_due = time.monotonic()
        stuck = state.next_schedule_due is not None and state.next_schedule_due <= planned_at
        if stuck and not more:
            # Still due for the time just planned: a schedule this worker cannot plan
            # (logged once). Look again at the next regular poll, not in a busy loop.
            self._next_schedule_due = None
        return woke

    async def _refresh_due(self) -> None:
        state = await self._db(self.store.poll_state, self.queues)
        self._set_due(state.now, state.next_run_due, state.next_schedule_due)

    def _set_due(self, db_now: datetime, run_due: datetime | None, schedule_due: datetime | None) -> None:
        """Translate due times on the database clock into this process's monotonic clock."""
        mono = time.monotonic()
        self._db_offset = db_now - datetime.now(UTC)
        self._next_run_due = None if run_due is None else mono + (run_due - db_now).total_seconds()
        self._next_schedule_due = None if schedule_due is None else mono + (schedule_due - db_now).total_seconds()

    async def _claim_some(self) -> tuple[int, int]:
        """Claim up to the free slots if a run is due. Returns (claimed, asked)."""
        free = self._claimable()
        if free <= 0 or not self._due(self._next_run_due):
            return 0, 0
        claimed = await self._db(self.store.claim, self.id, free, self.queues, self.lease)
        self.counters.claimed += len(claimed)
        if claimed:
            self._claimed_at = time.monotonic()
        if len(claimed) < free:
            self._next_run_due = None
        for c in claimed:
            self._dispatch(c)
        return len(claimed), free

    def _claimable(self) -> int:
        return self.free_slots

    async def _materialize(self, now: datetime, limit: int = 100) -> tuple[bool, bool]:
        """Turn due schedule ticks into runs. Returns (whether a run may have become due,
        whether more ticks are due at `now` than this pass took: a full batch of schedules,
        or a plan that stopped at its tick limit)."""
        woke = more = False
        batch = await self._db(self.store.due_schedules, limit)
        for due in batch:
            plan = self._plan(due, now)
            if isinstance(plan, str):  # cannot be planned: record why, so it stops being due
                await self._db(self.store.mark_plan_error, due, plan)
                continue
            try:
                made = await self._db(self.store.materialize, due, plan)
            except DatabaseUnavailable:
                raise
            except DatabaseTransient as exc:  # e.g. a host frozen mid-tick holds this tick's row
                log.info("schedule %r: tick not materialized this pass (%s); trying its other schedules", due.name, exc)
                self.counters.locked_out += 1
                continue
            if made:
                self.counters.ticks += len(plan.run)
                self._emit_misfires(due, plan)
                woke = woke or bool(plan.run)
                more = more or plan.next_run_at <= now
            else:
                self.counters.locked_out += 1
        return woke, more or len(batch) >= limit

    def _plan(self, due: DueSchedule, now: datetime) -> Materialization | str:
        try:
            trigger = self._trigger(due)
            plan = timing.plan_ticks(
                trigger,
                due.next_run_at,
                now,
                misfire=due.misfire,
                grace=timedelta(seconds=due.misfire_grace),
            )
        except ConfigurationError as exc:
            if due.name not in self._bad_schedules:
                self._bad_schedules.add(due.name)
                log.error(
                    "schedule %r cannot be planned on this worker and is left alone: %s",
                    due.name,
                    exc,
                )
            return str(exc)
        return Materialization(plan.run, plan.skipped, plan.skipped_more, plan.next_run_at)

    def _trigger(self, due: DueSchedule) -> timing.Trigger:
        key = (due.cron, due.every, due.tz)
        trigger = self._triggers.get(key)
        if trigger is None:
            every = timedelta(seconds=due.every) if due.every is not None else None
            trigger = timing.make_trigger(cron=due.cron, every=every, tz=due.tz)
            self._triggers[key] = trigger
        return trigger

    async def _gather_slots(self, want: int, max_wait: float) -> None:
        deadline = time.monotonic() + max_wait
        while self._claimable() < want:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._slot_freed.clear()
            await self._wait_event(self._slot_freed, remaining)

    async def _wait_for_slots(self, housekeeping_at: float) -> None:
        self._slot_freed.clear()
        if self._claimable() > 0:
            return
        await self._wait_event(self._slot_freed, self._until(housekeeping_at))

    async def _sleep_until(self, housekeeping_at: float) -> None:
        self._wake.clear()
        deadline = self._until(housekeeping_at, self._next_run_due)
        await self._wait_event(self._wake, deadline)

    @staticmethod
    def _until(*deadlines: float | None) -> float:
        soonest = min(d for d in deadlines if d is not None)
        return max(0.0, soonest - time.monotonic())

    async def _wait_event(self, event: asyncio.Event, timeout: float) -> None:
        if timeout <= 0:
            await asyncio.sleep(0)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)

    async def _sleep_or_wake(self, delay: float) -> None:
        self._wake.clear()
        await self._wait_event(self._wake, delay)

    async def _sleep_or_stop(self, delay: float) -> bool:
        """Sleep; True if a stop was requested meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop_requested.wait(), delay)
        return self._stop_requested.is_set()

    def _on_wakeup(self, payload: str) -> None:
        """A store notification (thread-safe entry via _notify_threadsafe)."""
        if payload.startswith("cancel:"):
            with contextlib.suppress(ValueError):
                self._request_cancel(int(payload[7:]))
            return
        if payload == "schedule":
            self._next_schedule_due = time.monotonic()
            self._tick_wake.set()
            return
        self._next_run_due = time.monotonic()
        self._wake.set()

    def _notify_threadsafe(self, payload: str) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._on_wakeup, payload)

    async def _listen(self) -> None:
        """Wake-ups from the store: LISTEN/NOTIFY on PostgreSQL, data_version on SQLite."""
        store = self.store
        listen = getattr(store, "listen", None)
        if listen is not None:
            await listen(self._on_wakeup)
            return
        listeners = getattr(store, "listeners", None)
        if listeners is None:
            return
        listeners.append(self._notify_threadsafe)
        try:
            await self._watch_data_version(store)
        finally:
            listeners.remove(self._notify_threadsafe)

    async def _watch_data_version(self, store: Any) -> None:
        """Another process committed to the SQLite file: look for work (cheap, no disk I/O).
        Every 20 ms while runs keep coming, every 50 ms once none was claimed for 5 s (our
        own heartbeats also change the file, so "quiet" is judged by claims, not changes)."""
        seen = None
        while True:
            quiet = time.monotonic() - self._claimed_at > 5.0
            await asyncio.sleep(0.2 if not self.free_slots else 0.05 if quiet else 0.02)
            try:
                version = store.data_version()
            except DatabaseError:
                continue
            if seen is not None and version != seen and self.free_slots:
                self._next_run_due = time.monotonic()
                self._wake.set()
            seen = version

    # -- dispatch ------------------------------------------------------------------------
    def _dispatch(self, claim: Claimed) -> None:
        task = self.app.tasks.get(claim.task)
        active = _Active(claim, task)
        self.inflight[claim.id] = active
        self.counters.dispatched += 1
        for observe in self._observers:
            observe("started", claim, time.time())
        if task is None:
            self._complete(active, ("unknown", None))
            return
        if task.opts.pass_context or task.opts.isolation == "process":
            active._cancel = threading.Event()  # made here, on the loop: the handler's thread reads it
        if task.opts.isolation == "process":
            self._threads.submit(lambda: self._thread_done(active, self._call_in_child(active, task)))
        elif task.is_async:
            active.async_task = asyncio.get_running_loop().create_task(
                self._call_async(active, task), name=f"rota-run-{claim.id}"
            )
        else:
            self._threads.submit(lambda: self._thread_done(active, self._call_sync(active, task)))
            if claim.timeout is not None:
                loop = asyncio.get_running_loop()
                active.timer = loop.call_later(claim.timeout, self._on_timeout, active)

    def _context(self, active: _Active) -> RunContext:
        c = active.claim
        return RunContext(
            str(c.id),
            c.task,
            c.attempt,
            c.max_attempts,
            c.token,
            c.scheduled_for,
            c.schedule,
            active.cancel,
        )

    def _call_sync(self, active: _Active, task: Task[Any, Any]) -> tuple[str, Any]:
        """On a pool thread: decode arguments, call the handler, encode its result."""
        c = active.claim
        try:
            args, kwargs = _decode_arguments(c)
            if task.opts.pass_context:
                result = task.fn(self._context(active), *args, **kwargs)
            else:
                result = task.fn(*args, **kwargs)
            return "ok", encode_result(task.name, result)
        except BaseException as exc:
            return "error", exc

    async def _call_async(self, active: _Active, task: Task[Any, Any]) -> None:
        c = active.claim
        outcome: tuple[str, Any]
        try:
            args, kwargs = _decode_arguments(c)
            if task.opts.pass_context:
                args.insert(0, self._context(active))
            async with asyncio.timeout(c.timeout) as scope:
                result = await task.fn(*args, **kwargs)
            outcome = "ok", encode_result(task.name, result)
        except asyncio.CancelledError as exc:
            if not (active.cancel_requested or active.done):
                raise
            outcome = "cancelled", exc
        except TimeoutError as exc:
            outcome = ("timeout", None) if scope.expired() else ("error", exc)
        except Exception as exc:
            outcome = "error", exc
        self._complete(active, outcome)

    def _call_in_child(self, active: _Active, task: Task[Any, Any]) -> tuple[str, Any]:
        c = active.claim
        try:
            _decode_arguments(c)
            module, qualname = handler_path(task.fn)
        except ValueError as exc:
            return "error", exc
        context = None
        if task.opts.pass_context:
            context = {
                "run_id": str(c.id),
                "task": c.task,
                "attempt": c.attempt,
                "max_attempts": c.max_attempts,
                "token": c.token,
                "scheduled_for": c.scheduled_for,
                "schedule": c.schedule,
            }
        kind, value = run_in_child(module, qualname, task.name, c.args, c.kwargs, context, c.timeout, active.cancel)
        if kind == "error":
            return "child_error", value
        if kind == "cancelled":
            return ("cancelled", None) if active.cancel_requested else ("lost", None)
        return kind, value

    def _thread_done(self, active: _Active, outcome: tuple[str, Any]) -> None:
        """From a pool thread: hand the outcome to the loop (one wake-up per burst)."""
        self._done.append((active, outcome))
        if not self._done_scheduled:
            self._done_scheduled = True
            loop = self._loop
            if loop is not None and not loop.is_closed():
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._drain_done)

    def _drain_done(self) -> None:
        self._done_scheduled = False
        while self._done:
            active, outcome = self._done.popleft()
            if active.done:
                if active.stuck:  # a timed-out or fenced-off thread finally returned
                    active.stuck = False
                    self._stuck -= 1
                    self._slot_freed.set()
                continue
            self._complete(active, outcome)

    def _on_timeout(self, active: _Active) -> None:
        """A sync handler passed its timeout: record the timeout; its thread keeps the slot
        (counted as stuck) until the handler really returns."""
        if active.done:
            return
        active.cancel.set()
        self._mark_stuck(active)
        self._complete(active, ("timeout", None))

    def _mark_stuck(self, active: _Active) -> None:
        if not active.stuck:
            active.stuck = True
            self._stuck += 1

    # -- outcomes ------------------------------------------------------------------------
    def _complete(self, active: _Active, outcome: tuple[str, Any]) -> None:
        """The attempt ended (or was given up): free its slot and queue its outcome."""
        if active.done:
            return
        active.done = True
        if active.timer is not None:
            active.timer.cancel()
        del self.inflight[active.claim.id]
        self._slot_freed.set()
        if outcome[0] == "lost":
            return
        record = self._outcome(active, outcome)
        for observe in self._observers:
            observe(record.status, active.claim, time.time())
        self._outbox.append(record)
        self._outbox_ready.set()

    def _outcome(self, active: _Active, outcome: tuple[str, Any]) -> Outcome:
        c = active.claim
        kind, value = outcome
        if kind == "ok":  # even if cancellation was requested: the handler says it is done
            self.counters.succeeded += 1
            return Outcome(c.id, c.token, "succeeded", result=value)
        if kind == "unknown":
            self.counters.failed += 1
            known = ", ".join(sorted(self.app.tasks)) or "none"
            message = (
                f"task {c.task!r} is not registered in worker {self.id} (registered: {known}); "
                f"deploy code that defines it, then `rota retry {c.id}`"
            )
            return Outcome(c.id, c.token, "failed", error=simple_error("TaskNotFound", message))
        if (active.cancel_requested and kind in ("cancelled", "error", "child_error", "timeout")) or (
            kind == "error" and isinstance(value, Cancelled)
        ):
            self.counters.cancelled += 1
            return Outcome(c.id, c.token, "cancelled", error=simple_error("Cancelled", "cancelled on request"))
        error, retryable = self._error_of(active, kind, value)
        task = active.task
        retry_on = task.opts.retry_on if task is not None else None
        if c.attempt < c.max_attempts and retryable and (retry_on is None or _matches(value, retry_on)):
            self.counters.retried += 1
            delay = self._backoff(active).delay(c.attempt)
            history = {
                "attempt": c.attempt,
                "worker": self.id,
                "started_at": _iso(c.started_at),
                "finished_at": _iso(datetime.now(UTC) + self._db_offset),  # the database's clock
                "status": "timed out" if kind == "timeout" else "failed",
                "error": json.loads(error),
            }
            return Outcome(c.id, c.token, "pending", error=error, retry_in=delay, history=storable(encode(history)))
        self.counters.failed += 1
        return Outcome(c.id, c.token, "failed", error=error)

    def _error_of(self, active: _Active, kind: str, value: Any) -> tuple[str, bool]:
        """(error JSON, whether a retry may help)."""
        c = active.claim
        if kind == "timeout":
            self.counters.timed_out += 1
            return simple_error("Timeout", f"run {c.id} exceeded its timeout of {c.timeout:g} s"), True
        if kind == "crashed":
            return simple_error("ChildCrashed", f"the isolated process of run {c.id} died with exit code {value}"), True
        if kind == "child_error":
            return storable(encode(value)), True
        if isinstance(value, CorruptArguments):  # retrying cannot repair the stored row
            return simple_error("CorruptArguments", str(value)), False
        if isinstance(value, BaseException):
            return encode_error(value), True
        return storable(encode(error_payload(RuntimeError(str(value))))), True

    def _backoff(self, active: _Active) -> Backoff:
        if active.claim.backoff:
            return Backoff.from_json(json.loads(active.claim.backoff))
        return active.task.opts.backoff if active.task is not None else Backoff()

    async def _completer(self) -> None:
        """Supervise the outcome writer: if it ever dies, log why and start it again."""
        while True:
            try:
                await self._write_outcomes()
            except Exception:
                log.exception("the outcome writer failed; restarting it (queued outcomes are kept)")
                self._outbox[:0], self._writing = self._writing, []
                await asyncio.sleep(0.05)
                self._outbox_ready.set()

    async def _write_outcomes(self) -> None:
        """Write queued outcomes in small batches, token-checked; keep them through outages."""
        while True:
            await self._outbox_ready.wait()
            if self.flush_interval and self._claiming:
                await asyncio.sleep(self.flush_interval)
            self._outbox_ready.clear()
            await self._flush()

    async def _flush(self) -> bool:
        """Write what the outbox holds now. False if a transient error kept some back (they
        stay queued, their leases renewed, and are tried again after a backoff)."""
        batch, self._outbox = self._outbox, []
        if not batch:
            return True
        self._writing = batch
        try:
            written = await self._db(self.store.finish, batch)
            retry: list[Outcome] = []
        except DatabaseTransient as exc:
            written, retry = set(), batch
            failure: BaseException = exc
        except Exception as exc:  # a permanent error, or a value the driver cannot encode
            written, retry = await self._finish_one_by_one(batch, exc)
            failure = exc
        finally:
            self._writing = []
        if retry:
            self._outbox[:0] = retry
            await self._sleep_or_stop(self._outage.failed(failure))
            self._outbox_ready.set()
        elif self._outage.ok():
            await self._after_outage()
        self._count_stale(batch, written, retry)
        return not retry

    def _count_stale(self, batch: list[Outcome], written: set[int], retry: list[Outcome]) -> None:
        kept = {o.id for o in retry}
        for o in batch:
            if o.id in written:
                self._emit(OUTCOME_EVENTS[o.status], run_id=o.id)
            elif o.id not in kept:
                self.counters.stale_writes += 1
                log.warning(
                    "run %s: outcome %r discarded: token %s no longer holds the run (its lease was lost and it was rescued)",
                    o.id,
                    o.status,
                    o.token,
                )

    async def _finish_one_by_one(self, batch: list[Outcome], exc: BaseException) -> tuple[set[int], list[Outcome]]:
        """After a batch failed for a reason other than a transient error: write each outcome
        on its own, so one bad value cannot hold back the others. Returns (written, to retry)."""
        log.error("writing %d outcomes failed (%s); writing them one by one", len(batch), exc)
        written: set[int] = set()
        retry: list[Outcome] = []
        for o in batch:
            try:
                written |= await self._db(self.store.finish, [o])
            except DatabaseTransient:
                retry.append(o)
            except Exception as one:
                written |= await self._finish_unstorable(o, one, retry)
        return written, retry

    async def _finish_unstorable(self, o: Outcome, exc: BaseException, retry: list[Outcome]) -> set[int]:
        """The store refused this outcome's values for good: record the run failed, saying why."""
        message = f"run {o.id}: its {o.status} outcome could not be stored ({type(exc).__name__}: {exc})"
        log.error("%s; recording the run as failed", message)
        failed = Outcome(o.id, o.token, "failed", error=simple_error("UnstorableOutcome", message))
        try:
            return await self._db(self.store.finish, [failed])
        except DatabaseTransient:
            retry.append(failed)
        except Exception as again:
            log.error("run %s: could not record that failure either (%s); it will be rescued", o.id, again)
            return {o.id}  # not stale: nothing more this worker can do
        return set()

    # -- heartbeats and cancellation -------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            await self._heartbeat()

    async def _heartbeat(self) -> None:
        try:
            await self._renew()
        except DatabaseError as exc:
            self._outage.failed(exc)
            return
        try:  # the registry is secondary: its failure must not lose the renewal's news
            await self._db(self.store.worker_seen, self.id, self.state, self._stuck)
        except DatabaseError as exc:
            log.debug("could not update the worker registry: %s", exc)

    async def _renew(self) -> None:
        """Renew the lease of every run this worker holds (running, or its outcome queued or
        being written), token-checked and whether or not the lease has expired meanwhile;
        stop the runs that were lost, pass on cancellation requests. Raises DatabaseError."""
        held = [(run_id, a.claim.token) for run_id, a in self.inflight.items()]
        held += [(o.id, o.token) for o in self._outbox]
        held += [(o.id, o.token) for o in self._writing]
        alive, cancel = await self._db(self.store.heartbeat, held, self.lease)
        for run_id, token in held:
            active = self.inflight.get(run_id)
            if run_id not in alive and active is not None and not active.done and active.claim.token == token:
                self._lease_lost(active)
        for run_id in cancel:
            self._request_cancel(run_id)

    def _lease_lost(self, active: _Active) -> None:
        self.counters.lost += 1
        log.warning(
            "run %s (%s): lease lost (rescued by another worker); stopping it, its result will be discarded",
            active.claim.id,
            active.claim.task,
        )
        active.cancel.set()
        if active.async_task is not None:
            active.async_task.cancel()
        elif active.task is not None and active.task.opts.isolation == "none":
            self._mark_stuck(active)
        self._complete(active, ("lost", None))

    def _request_cancel(self, run_id: int) -> None:
        active = self.inflight.get(run_id)
        if active is None or active.cancel_requested:
            return
        log.info("run %s (%s): cancellation requested", run_id, active.claim.task)
        active.cancel_requested = True
        active.cancel.set()
        if active.async_task is not None:
            active.async_task.cancel()

    async def _reconnect(self) -> None:
        """The poll loop after a database error: before any rescue or claim, renew our own
        leases (raises while the database is still away), then end the outage and write
        the outcomes computed meanwhile."""
        self.store_recover()
        await self._renew()
        await self._db(self.store.poll_state, self.queues)  # reachable, even if we hold nothing
        if self._outage.ok():
            await self._learn_db_started()
        await self._flush()

    async def _after_outage(self) -> None:
        """Another task found the database back: renew leases, write results, look again."""
        self.store_recover()
        with contextlib.suppress(DatabaseError):
            await self._renew()
            await self._learn_db_started()
        self._outbox_ready.set()

    async def _learn_db_started(self) -> None:
        """When the database server started (PostgreSQL), for the rescue rule (not with a
        configured clock: its time has nothing to do with the server's)."""
        if self.app.clock is not None:
            return
        with contextlib.suppress(DatabaseError):
            self._outage.db_started = await self._db(self.store.database_started)

    def _describe_task(self, name: str) -> str:
        """A label for the asyncio task `name` (a run's handler, or a worker task)."""
        if name.startswith("rota-run-"):
            active = self.inflight.get(int(name[9:])) if name[9:].isdigit() else None
            task = f" ({active.claim.task})" if active is not None else ""
            return f"run {name[9:]}{task}"
        return f"task {name!r}"

    def store_recover(self) -> None:
        recover = getattr(self.store, "recover", None)
        if recover is not None:
            with contextlib.suppress(Exception):
                recover()

    # -- maintenance -----------------------------------------------------------------------
    async def _maintenance_loop(self) -> None:
        """Prune finished runs past their retention, in small batches, under a shared lease."""
        retention = self.app.retention
        if not retention:
            return
        while True:
            await asyncio.sleep(self.app.prune_interval * random.uniform(0.8, 1.2))
            with contextlib.suppress(DatabaseError):
                await self._prune(retention)

    async def _prune(self, retention: dict[str, timedelta]) -> int:
        token = await self._db(self.store.lock_acquire, "rota:prune", self.id, 60.0)
        if token is None:
            return 0
        total = 0
        try:
            for status, keep in retention.items():
                while True:
                    n = await self._db(self.store.prune, status, keep.total_seconds(), 1000)
                    total += n
                    if n < 1000:
                        break
                    await asyncio.sleep(0.05)
            await self._db(
                self.store.prune_workers, self.app.lease * 3, min(k.total_seconds() for k in retention.values())
            )
        finally:
            await self._db(self.store.lock_release, "rota:prune", self.id, token)
        self.counters.pruned += total
        if total:
            log.info("pruned %d finished runs past their retention", total)
        return total

    # -- shutdown --------------------------------------------------------------------------
    def _begin_stop(self) -> None:
        if self._stop_requested.is_set():
            if not self._force:
                log.warning("second stop signal: handing unfinished runs back now")
                self._force = True
                self._slot_freed.set()  # wakes the drain, which sees _force
            return
        log.info(
            "worker %s stopping: no new claims; draining %d run(s) for up to %.1f s",
            self.id,
            len(self.inflight),
            self.shutdown_timeout,
        )
        self.state = "draining"
        self._claiming = False
        self._wake.set()
        self._slot_freed.set()
        self._stop_requested.set()

    async def _shutdown(self, background: list[asyncio.Task[None]]) -> None:
        poll = background[0]
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(asyncio.shield(poll), 5)
        await self._drain()
        await self._hand_back_unfinished()
        for _ in range(500):  # let a write in progress (the completer's) finish first
            if not self._writing:
                break
            await asyncio.sleep(0.01)
        for _ in range(3):
            if await self._flush():
                break
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await self._db(self.app.release_process_locks)
        self.state = "stopped"
        with contextlib.suppress(DatabaseError):
            await self._db(self.store.worker_seen, self.id, "stopped")
        log.info("worker %s stopped", self.id)
        self._emit("worker_stopped")
        await asyncio.to_thread(self.app.events.drain, 5.0)  # hooks hear it before the process exits

    async def _drain(self) -> None:
        deadline = time.monotonic() + self.shutdown_timeout
        while self.inflight and not self._force:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._slot_freed.clear()
            await self._wait_event(self._slot_freed, min(remaining, 0.5))

    async def _hand_back_unfinished(self) -> None:
        if not self.inflight:
            return
        unfinished = list(self.inflight.values())
        for active in unfinished:
            self._lease_lost_quietly(active)
        held = [(a.claim.id, a.claim.token) for a in unfinished]
        try:
            back = await self._db(self.store.hand_back, held, f"worker {self.id} shut down before the run finished")
        except DatabaseError as exc:
            log.error(
                "could not hand back %d run(s) (%s); they will be rescued when their lease expires",
                len(held),
                exc,
            )
            return
        log.warning(
            "handed back %d unfinished run(s) for another worker to take at once: %s",
            len(back),
            sorted(back),
        )

    def _lease_lost_quietly(self, active: _Active) -> None:
        active.cancel.set()
        if active.async_task is not None:
            active.async_task.cancel()
        self._complete(active, ("lost", None))

    # -- plumbing --------------------------------------------------------------------------
    async def _db(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a store call on the store's threads; the loop keeps going meanwhile."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()

        def call() -> None:
            try:
                result = fn(*args)
            except BaseException as exc:
                _resolve(loop, future, None, exc)
            else:
                _resolve(loop, future, result, None)

        self._db_pool.submit(call)
        return await future

    def _install_signals(self) -> None:
        if not self.install_signal_handlers or threading.current_thread() is not threading.main_thread():
            self.install_signal_handlers = False
            return
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._begin_stop)

    def _remove_signals(self) -> None:
        if not self.install_signal_handlers or self._loop is None:
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                self._loop.remove_signal_handler(sig)

    def _emit(self, name: str, **fields: Any) -> None:
        """Hand an event to the app's hooks (rota.events): cheap, never blocks."""
        self.app.events.emit(name, self.id, **fields)

    def _emit_misfires(self, due: DueSchedule, plan: Materialization) -> None:
        if not (plan.skipped or plan.skipped_more):
            return
        count = len(plan.skipped) + plan.skipped_more
        reason = plan.skipped[0][1] if plan.skipped else "missed ticks"
        self._emit("schedule_misfired", schedule=due.name, detail=f"{count} tick(s) skipped: {reason}")
        for tick, why in plan.skipped:
            self._emit("run_skipped", schedule=due.name, tick=tick, detail=why)

    def observe(self, callback: Callable[[str, Claimed, float], None]) -> None:
        """Call `callback(event, claim, unix_time)` on the loop when a run starts ('started')
        and ends (its status). Used by `rota demo`, metrics and tests; keep it cheap."""
        self._observers.append(callback)


def _resolve(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    result: Any,
    exc: BaseException | None,
) -> None:
    def apply() -> None:
        if future.done():
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)

    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(apply)


def _matches(value: Any, retry_on: tuple[type[BaseException], ...]) -> bool:
    return isinstance(value, retry_on) if isinstance(value, BaseException) else True


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _positive(name: str, value: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise ConfigurationError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


def _non_negative(name: str, value: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        raise ConfigurationError(f"{name} must be a number of seconds >= 0, got {value!r}")
    return float(value)


def _positive_int(name: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(f"{name} must be a positive integer, got {value!r}")
    return value
