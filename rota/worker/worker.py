"""The `Worker`: composes the roles (see the package docstring), and its lifecycle:
start (register, retrying while the database is away), run, stop, drain, hand back."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from .. import tracing
from ..errors import ConfigurationError, DatabaseError, DatabaseRefused, DatabaseTransient, SchemaVersionError
from ..executor import DaemonPool
from ..logs import log_event
from ..operate import notify_on_forever
from ..stores.base import Claimed, Outcome, Store
from .active import Active
from .claims import Claimer, Finisher, wait_all
from .completer import Completer
from .counters import WorkerCounters, worker_identity
from .db import Db
from .executors import Executors
from .leases import Leases
from .loopwatch import LoopWatch
from .maintenance import Maintenance
from .outage import Outage
from .outcomes import Decider
from .poll import Poller
from .prefetch import Prefetch, default_limit, prefetch_limit
from .rescue import Rescuer
from .service import spawn
from .settings import WorkerSettings
from .shutdown import Lifecycle
from .ticks import Ticker
from .view import WorkerView
from .wakeups import CLAIM_AHEAD, DueTimes, Wakeups

log = logging.getLogger("rota.worker")
BACKLOG_FLUSH = 0.03  # seconds the outcome writer waits in a backlog (see _buffer)
STORE_CALLS_GRACE = 5.0  # seconds a stopping worker waits for its store calls still under way


class Worker(Lifecycle):
    """Runs the tasks of one App. Create with `app.worker(...)`; `await run()` or `start()`."""

    def __init__(
        self,
        app: WorkerView,
        *,
        concurrency: int | None = None,
        queues: list[str] | tuple[str, ...] | None = None,
        lease: float | None = None,
        poll_interval: float | None = None,
        shutdown_timeout: float | None = None,
        heartbeat_interval: float | None = None,
        default_timeout: float | None = None,
        flush_interval: float = 0.002,
        install_signal_handlers: bool = True,
        metrics_port: int | None = None,
        prefetch: int | None = None,
        exit_after_stop: bool = False,
    ) -> None:
        """`exit_after_stop`: the process is this worker's (`rota worker` sets it). If a handler
        still runs when the worker has stopped, the worker ends the process with its last
        write (rota/worker/stopping.py); otherwise a thread keeps the run until it returns."""
        self.app = app
        s = WorkerSettings.build(
            app,
            concurrency=concurrency,
            queues=queues,
            lease=lease,
            poll_interval=poll_interval,
            shutdown_timeout=shutdown_timeout,
            heartbeat_interval=heartbeat_interval,
            flush_interval=flush_interval,
            default_timeout=default_timeout,
        )
        self.settings = s
        self._concurrency, self.queues, self.lease = s.concurrency, s.queues, s.lease
        self.poll_interval, self.shutdown_timeout = s.poll_interval, s.shutdown_timeout
        self.heartbeat_interval, self.flush_interval = s.heartbeat_interval, s.flush_interval
        limit = default_limit(s.concurrency) if prefetch is None else prefetch_limit(prefetch)
        self._prefetch = Prefetch(limit, s.concurrency)
        self.install_signal_handlers = install_signal_handlers
        self.exit_after_stop = exit_after_stop
        self.metrics_port = metrics_port
        self.id = worker_identity()
        self.counters = WorkerCounters()
        self.state = "starting"
        self._build_roles()
        self._claiming = True
        self._force = False
        self._stopped = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def concurrency(self) -> int:
        """The worker's slots: how many runs it works at once (fixed when it is made)."""
        return self._concurrency

    @concurrency.setter
    def concurrency(self, value: int) -> None:
        """Refused: the slots, the prefetch and the registry's capacity are sized when the
        worker is made (an assignment used to be silently ignored)."""
        if value != self._concurrency:
            raise ConfigurationError(
                f"cannot set concurrency={value!r} on worker {self.id}: it has {self._concurrency} slots, fixed when "
                "it is made; stop it and start one with app.worker(concurrency=N) (rota worker -c N)"
            )

    def _build_roles(self) -> None:
        """Make each role with the few others it talks to (see the package docstring)."""
        store, c = self._store, self.counters
        self._db = Db()
        self._outage = Outage(self.lease, min(10.0, self.heartbeat_interval), self.id)
        self._due = DueTimes()
        self._observers: list[Callable[[str, Claimed, float], None]] = []
        self._completer = Completer(store, self._db, self._outage, c, self._emit)
        self._decider = Decider(self.id, c, self.app.tasks, lambda: self._due.db_offset)
        self._executors = Executors(self.concurrency, self._deliver, self._store)
        self._executors.traced = self.id if tracing.enabled() else None  # a span per attempt
        self._executors.default_timeout = self.settings.default_timeout or None
        self._leases = Leases(self.id, store, self._db, self._executors, self._completer, self._outage, c)
        self._rescuer = Rescuer(self.id, store, self._db, self._outage, c, self._emit)
        self._claimer = Claimer(
            self.id, store, self._db, self._due, self._executors, c, self.app.tasks, self._completer
        )
        self._finisher = Finisher(self._executors, self._decider, self._completer, self._claimer)
        self._ticker = Ticker(self.id, store, self._db, self._due, self._outage, c, self._emit)
        self._wakeups = Wakeups(store, self._due, lambda: self._executors.free_slots)
        roles = (self._leases, self._completer, self._rescuer, self._claimer, self._ticker)
        self._poller = Poller(self.id, store, self._db, self._due, self._outage, c, roles)
        app = self.app
        self._maintenance = Maintenance(self.id, store, self._db, c, app.retention, app.prune_interval, app.lease)
        self._loop_watch = LoopWatch()
        self._executors.watch = self._loop_watch.watching
        self._wire_roles()

    def _wire_roles(self) -> None:
        """The small explicit methods the roles call on each other, and their settings."""
        self._leases.lease, self._leases.interval = self.lease, self.heartbeat_interval
        self._leases.complete = self._deliver
        self._leases.registry = lambda: (self.state, self._executors.stuck)
        self._executors.stuck_changed = self._leases.registry_changed
        self._completer.after_outage = self._poller.after_outage
        self._completer.refused = self._leases.check_soon
        self._completer.sleep_or_stop = self._sleep_or_stop
        self._rescuer.use_db_start = self.app.clock is None
        self._claimer.queues, self._claimer.lease = self.queues, self.lease
        self._claimer.observers = self._observers
        self._claimer.superseded = self._leases.lost
        self._claimer.prefetch = self._prefetch
        self._leases.prefetch = self._prefetch
        self._leases.start_held = self._claimer.start_held
        self._claimer.holding = self._leases.holding
        self._prefetch.claiming = lambda: self._claiming
        self._prefetch.running = self._executors.inflight
        self._ticker.queues, self._ticker.poll_interval = self.queues, self.poll_interval
        self._ticker.claiming = self._ticker_claiming
        self._ticker.sleep_or_stop = self._sleep_or_stop
        self._wakeups.cancel = self._leases.request_cancel
        self._wakeups.owner = self.id
        self._wakeups.holding = lambda: bool(self._executors.inflight or self._prefetch.held)
        self._wakeups.refresh = self._poller.refresh_due
        self._poller.queues, self._poller.poll_interval = self.queues, self.poll_interval
        self._poller.batch = max(1, self.concurrency // 2)
        self._poller.claiming = lambda: self._claiming
        self._poller.flush = lambda: self._flush()

    def _ticker_claiming(self) -> bool:
        return self._claiming

    def _store(self) -> Store:
        return self.app.store

    def _deliver(self, active: Active, outcome: tuple[str, Any]) -> None:
        self._finisher.complete(active, outcome)

    def _emit(self, name: str, **fields: Any) -> None:
        """Hand an event to the app's hooks (rota.events): cheap, never blocks."""
        self.app.events.emit(name, self.id, **fields)

    # -- what callers read -----------------------------------------------------------------
    @property
    def inflight(self) -> dict[int, Active]:
        return self._executors.inflight

    @property
    def free_slots(self) -> int:
        """Slots free for new runs (a stuck thread keeps its slot until it returns)."""
        return self._executors.free_slots

    @property
    def stuck(self) -> int:
        """Handler threads still running after their run timed out or lost its lease."""
        return self._executors.stuck

    def observe(self, callback: Callable[[str, Claimed, float], None]) -> None:
        """Call `callback(event, claim, unix_time)` on the loop when a run starts ('started')
        and ends (its status). Used by `rota demo`, metrics and tests; keep it cheap. One
        that raises is logged (with its traceback the first time) and changes no run."""
        self._observers.append(callback)

    # -- the main coroutine ----------------------------------------------------------------
    async def run(self) -> None:
        """Run until stopped (SIGTERM/SIGINT, `stop()`), then shut down gracefully."""
        self._bind_loop()
        self._install_signals()
        try:
            if not await self._start():
                return
            background = self._spawn_roles()
            if self.metrics_port is not None:
                from ..metrics import serve_worker_metrics

                serve_worker_metrics(self, self.metrics_port)
            await self._stop_requested.wait()
            await self._shutdown(background)
        finally:
            self._remove_signals()
            self._executors.handoff.pool.close()
            self._db.close()
            try:  # a role's store call may still run (its task was cancelled): stopped once it ends
                await self._calls_ended()
            finally:
                self._stopped.set()

    async def _calls_ended(self) -> None:
        """Wait for the store calls still under way (an app closed after stop() would close
        their connections under them); a call hung past STORE_CALLS_GRACE is logged and left
        (the store refuses calls after close and closes no connection in use, see SQLite's)."""
        if not await self._db.ended(STORE_CALLS_GRACE):
            log.warning("worker %s stopped with store calls still under way after %.0f s", self.id, STORE_CALLS_GRACE)

    def _spawn_roles(self) -> list[asyncio.Task[None]]:
        """Each role's task; the poll loop first (shutdown waits for it)."""
        return [
            spawn("rota-poll", self._poller.run),
            spawn("rota-heartbeat", self._leases.run),
            spawn("rota-completer", lambda: self._completer.run(lambda: self._flush(), self._buffer)),
            spawn("rota-ticks", self._ticker.run),
            spawn("rota-loopwatch", lambda: self._loop_watch.run(self._executors.describe)),
            spawn("rota-listen", self._wakeups.run),
            spawn("rota-maintenance", self._maintenance.run),
            spawn("rota-notify-on", lambda: notify_on_forever(self.app, self._db)),  # stored schedules'
        ]

    def _buffer(self) -> float:
        """How long the writer gathers outcomes into one batch (none once draining). While
        runs are claimed ahead the next claim comes within milliseconds and takes the
        outcomes along in its transaction: the writer waits longer, for those it leaves."""
        if not self._claiming:
            return 0.0
        along = self._prefetch.active() or self.app.store.limits_due()  # the claimer takes them along
        return max(self.flush_interval, BACKLOG_FLUSH) if along else self.flush_interval

    def _bind_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_requested = asyncio.Event()
        self._due.bind()
        self._executors.bind(self._loop)
        self._leases.changed = asyncio.Event()
        self._wakeups.loop = self._loop
        self._completer.ready = asyncio.Event()

    async def run_until_idle(self) -> int:
        """Process what is due now, then return the number of runs executed: materialize due
        schedule ticks, claim and execute due runs, write their outcomes, repeat until
        nothing is due. No signals, heartbeats or sleeping; for tests (see rota.testing)."""
        self._bind_loop()
        await self._db(self.app.prepare)
        await self._rescuer.learn_db_started()
        executed = 0
        try:
            while True:
                await self._poller.housekeeping()
                self._due.run_due = 0.0
                claimed, _ = await self._claimer.claim_some()
                executed += claimed
                await wait_all(self._executors)
                await self._flush()
                if claimed == 0:
                    return executed
        finally:
            self._decider.flush()
            self._executors.handoff.reopen()
            self._db.reopen()

    async def _start(self) -> bool:
        """Open the store (retrying while the database is unreachable), register, sync schedules."""
        self.app._adopt_worker(self)
        while True:
            try:
                await self._register()
                break
            except (SchemaVersionError, DatabaseRefused):
                raise  # nothing to wait for: the start fails with the reason
            except DatabaseTransient as exc:  # unreachable, or a connection cut mid-start
                if await self._sleep_or_stop(self._outage.failed(exc, starting=True)):
                    return False
        await self._ticker.warn_about_fast_schedules(self.app.schedules, self.app.high_frequency)
        await self._warn_autovacuum()
        self.state = "running"
        self._emit("worker_started")
        self._log_started()
        return True

    async def _register(self) -> None:
        await self._db(self.app.prepare)
        store = self.store
        if self._due.claim_ahead == CLAIM_AHEAD:  # (unless set otherwise) longer than the store's claim takes
            self._due.claim_ahead = store.claim_lead
        # the row and its lease in one statement (a cut between two left a row without it)
        await self._db(
            store.register_worker, self.id, socket.gethostname(), os.getpid(), self.concurrency, self.queues, self.lease
        )
        self._outage.ok()
        await self._rescuer.learn_db_started()

    async def _warn_autovacuum(self) -> None:
        """PostgreSQL: one warning line when autovacuum is off (rota.stores.postgres.vacuum)."""
        warn = getattr(self.store, "warn_autovacuum", None)
        if warn is not None:
            with contextlib.suppress(DatabaseError):  # a start is no place to fail over a check
                await self._db(warn)

    def _log_started(self) -> None:
        queues = ",".join(self.queues) if self.queues else "all"
        message = (
            f"worker {self.id} started: concurrency {self.concurrency}, queues {queues}, lease {self.lease:.1f} s, "
            f"{len(self.app.tasks)} task(s), {len(self.app.schedules)} schedule(s), database {self.app.database_label}"
        )
        log_event(log, logging.INFO, "worker_started", message, worker=self.id, concurrency=self.concurrency)

    # -- seams kept for tests and tools ----------------------------------------------------

    async def _flush(self) -> bool:
        """Write the queued outcomes now (the completer's flush)."""
        return await self._completer.flush()

    async def _housekeeping(self) -> None:
        await self._poller.housekeeping()

    async def _prune(self, retention: dict[str, timedelta]) -> int:
        return await self._maintenance.prune(retention)

    @property
    def _outbox(self) -> list[Outcome]:
        return self._completer.outbox

    @_outbox.setter
    def _outbox(self, value: list[Outcome]) -> None:
        self._completer.outbox = value

    @property
    def _wake(self) -> asyncio.Event:
        return self._due.wake

    @property
    def _threads(self) -> DaemonPool:
        return self._executors.handoff.pool

    @property
    def _db_pool(self) -> DaemonPool:
        return self._db.pool

    async def _sleep_or_stop(self, delay: float) -> bool:
        """Sleep; True if a stop was requested meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop_requested.wait(), delay)
        return self._stop_requested.is_set()
