"""The worker's lifecycle controls: start on a thread, stop (thread-safe), signals, and
the graceful shutdown: stop claiming (and making ticks), withdraw the runs this worker made
ahead of a tick not come yet (see ticks.py), hand back the runs it holds (claimed, never
started), drain up to `shutdown_timeout`, stop what is left (kill child processes, cancel
coroutines) and hand back the runs whose handlers ended (pending again at once, the attempt
not counted), flush outcomes, release this process's named locks, mark the worker stopped.
A run whose handler still runs (a thread cannot be killed) is never handed back: see
rota/worker/stopping.py. A second signal skips the drain."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from typing import Any

from ..errors import DatabaseError
from ..logs import log_event
from ..stores.base import Store
from .active import Active
from .claims import Finisher
from .completer import Completer
from .db import Db
from .executors import Executors, still_running
from .leases import Leases
from .outcomes import Decider
from .prefetch import Prefetch
from .service import wait_event
from .stopping import FENCE, Keeper, fence_and_exit, save_deferred
from .ticks import Ticker
from .view import WorkerView
from .wakeups import DueTimes

log = logging.getLogger("rota.worker")
# seconds a stopped run gets to end, by executor: a child process is killed and reaped; a
# cancelled coroutine ends at its next await (unless it ignores its cancellation); a `def`
# handler sees ctx.cancelled and returns at its next look (the deploy guide's advice)
STOP_GRACE = {"process": 6.0, "coroutine": 0.5, "thread": 1.0, "transactional": 1.0}


class Lifecycle:
    """Start/stop/drain/hand back for `Worker` (which sets these fields up)."""

    app: WorkerView
    id: str
    state: str
    shutdown_timeout: float
    lease: float
    heartbeat_interval: float
    exit_after_stop: bool
    install_signal_handlers: bool
    _claiming: bool
    _force: bool
    _stopped: threading.Event
    _stop_requested: asyncio.Event
    _loop: asyncio.AbstractEventLoop | None
    _db: Db
    _executors: Executors
    _completer: Completer
    _finisher: Finisher
    _decider: Decider
    _leases: Leases
    _due: DueTimes
    _prefetch: Prefetch
    _ticker: Ticker

    async def run(self) -> None:
        raise NotImplementedError

    async def _flush(self) -> bool:
        raise NotImplementedError

    def _emit(self, name: str, **fields: Any) -> None:
        raise NotImplementedError

    @property
    def store(self) -> Store:
        return self.app.store

    def stop(self, wait: bool = True, timeout: float | None = None) -> bool:
        """Ask the worker to stop (thread-safe). With wait, block until it has stopped (or
        `timeout` passed); returns whether it has stopped (its store calls ended too, within
        5 s: `app.close()` after it closes no connection under one). A run whose handler
        still runs then (a thread cannot be killed) stays held by this worker, its lease
        renewed by a thread, until the handler returns; it is handed back then
        (rota/worker/stopping.py)."""
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

    def _begin_stop(self) -> None:
        slot_freed = self._executors.slot_freed
        if self._stop_requested.is_set():
            if not self._force:
                log.warning("second stop signal: handing unfinished runs back now")
                self._force = True
                slot_freed.set()  # wakes the drain, which sees _force
            return
        n = len(self._executors.inflight)
        message = (
            f"worker {self.id} stopping: no new claims; draining {n} run(s) for up to {self.shutdown_timeout:.1f} s"
        )
        log_event(log, logging.INFO, "worker_stopping", message, worker=self.id)
        self.state = "draining"
        self._claiming = False
        self._wake_all()
        self._stop_requested.set()

    def _wake_all(self) -> None:
        self._executors.slot_freed.set()
        self._due.wake.set()
        self._due.tick_wake.set()  # the ticker sees it must stop (see _withdraw_ticks_ahead)

    async def _shutdown(self, background: list[asyncio.Task[None]]) -> None:
        poll = background[0]
        with contextlib.suppress(asyncio.TimeoutError):  # a partition must not delay the drain
            await asyncio.wait_for(self._leases.seen(), 2)  # `rota workers` says draining now
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(asyncio.shield(poll), 5)
        await self._withdraw_ticks_ahead(background)
        held = self._prefetch.take_all()  # held runs: handed back before the drain, not after it
        if not await self._give_back([], held):
            self._prefetch.hold_all(held, time.monotonic())  # renewed meanwhile; tried again after the drain
        await self._drain()
        kept = await self._hand_back_unfinished()
        await self._completer.wait_idle()  # let a write in progress (the completer's) finish first
        for _ in range(3):
            if await self._flush():
                break
        if not kept:  # (a handler still running may hold one, with app.lock(...): they end with their ttl)
            await self._db(self.app.release_process_locks)
        await self._mark_stopped()  # (the heartbeat still renews the leases of the runs kept)
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await self._after_stop(kept)

    async def _after_stop(self, kept: list[Active]) -> None:
        """The runs whose handlers still ran at the end of the drain: those that ended since
        are handed back (a limited run past its timeout: recorded timed out); the others are
        fenced and the process ended (`rota worker`), or held by a keeper thread until their
        handlers return (see rota/worker/stopping.py)."""
        self._leases.kept = []
        # one look decides: a handler that returns after it stays kept (the keeper hands its run
        # back, the fence marks it WorkerStopped); a second look missed it between the two
        ended = [a for a in kept if not still_running(a)]
        kept = [a for a in kept if a not in ended]
        await self._settle_ended(ended)
        await self._flush()
        if not kept:
            return
        if self.exit_after_stop:
            fence_and_exit(self.store, self.id, kept, self._force)
        Keeper(lambda: self.store, self.id, self.lease, self.heartbeat_interval, self._decider).start(kept)

    async def _withdraw_ticks_ahead(self, background: list[asyncio.Task[None]]) -> None:
        """Before the drain (which may outlast a tick): once the ticker has stopped, withdraw
        the runs it made ahead of a tick that has not come. A kill -9 leaves them."""
        ticker = next(task for task in background if task.get_name() == "rota-ticks")
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(asyncio.shield(ticker), 5)
        await self._ticker.withdraw_ahead()

    async def _mark_stopped(self) -> None:
        self.state = "stopped"
        self._finisher.decider.flush()  # the last window's runs_succeeded line
        with contextlib.suppress(DatabaseError):
            await self._db(self.store.worker_seen, self.id, "stopped")
        log_event(log, logging.INFO, "worker_stopped", f"worker {self.id} stopped", worker=self.id)
        self._emit("worker_stopped")
        await asyncio.to_thread(self.app.events.drain, 5.0)  # hooks hear it before the process exits

    async def _drain(self) -> None:
        deadline = time.monotonic() + self.shutdown_timeout
        slot_freed = self._executors.slot_freed
        while self._executors.inflight and not self._force:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            slot_freed.clear()
            await wait_event(slot_freed, min(remaining, 0.5))

    async def _hand_back_unfinished(self) -> list[Active]:
        """After the drain: ask every unfinished run to stop (a child process is killed, a
        coroutine cancelled; what a thread returns now is not written, as before), give the
        killed and cancelled a moment to end, and hand back the runs whose handlers ended
        (pending again at once, the attempt not counted). Returns the runs whose handlers
        still run (a thread cannot be killed; a coroutine may ignore its cancellation): they
        stay this worker's, their leases renewed, and are never handed back while this process
        can execute them (see _after_stop)."""
        unfinished = [a for a in self._executors.inflight.values() if not a.done]
        for active in unfinished:
            self._executors.stop(active, lost=False)
            if active.kind in ("thread", "transactional"):
                self._executors.finish(active)  # decided here (its slot, its result)
        # threads get a grace to see ctx.cancelled and return: their leases renewed meanwhile
        self._leases.kept = [a for a in unfinished if a.kind in ("thread", "transactional")]
        began = time.monotonic()
        while any(still_running(a) and time.monotonic() - began < STOP_GRACE.get(a.kind, 0) for a in unfinished):
            await asyncio.sleep(0.01)
        kept = [a for a in unfinished if still_running(a)]
        for active in kept:
            self._executors.finish(active)
            self._still_running(active)
        self._leases.kept = kept  # renewed by the heartbeat until _after_stop
        queued = set(self._completer.held())  # ended with an outcome (written, or being written)
        ended = [a for a in unfinished if a not in kept and (a.claim.id, a.claim.token) not in queued]
        await self._settle_ended(ended, self._prefetch.take_all())
        return kept

    def _still_running(self, active: Active) -> None:
        c = active.claim
        then = (
            f"this process ends after its last write, and the run is taken back as a lost worker's {FENCE:g} s later"
            if self.exit_after_stop
            else "it stays held by this worker, its lease renewed, until the handler returns; then it is handed back"
        )
        message = (
            f"run {c.id} {c.task} still running at shutdown: worker {self.id} cannot stop its handler, so the run "
            f"is not handed back; {then} (this process's named locks are kept: they end with their ttl)"
        )
        log_event(log, logging.WARNING, "run_still_running", message, run_id=str(c.id), task=c.task, worker=self.id)

    async def _settle_ended(self, ended: list[Active], held: list[Any] | None = None) -> None:
        """Runs stopped at shutdown whose handlers ended: handed back (with the held runs
        `held`), but a limited run already past its timeout (its thread ran on, see
        ThreadExecutor._on_timeout) is recorded timed out: its attempt counts, so a handler
        that always hangs uses up its retries across restarts."""
        for active in ended:
            if active.timed_out:
                self._executors.finish(active)
                record = self._decider.decide(active, "timeout", None)
                self._decider.log(active, "timeout", record)
                self._completer.put(record)
            else:
                self._finisher.complete(active, ("lost", None))
        await self._give_back([a for a in ended if not a.timed_out], held or [])

    async def _give_back(self, unfinished: list[Any], claims: list[Any]) -> bool:
        """Hand back the unfinished runs and the held ones (claimed ahead, never started:
        pending again as they were, another worker takes them at their due time). False if
        the database could not be reached (they are rescued when their leases expire)."""
        held = [(a.claim.id, a.claim.token) for a in unfinished]
        held += [(c.id, c.token) for c in claims]
        if not held:
            return True
        for run_id, _ in held:  # handed back: whatever their start, it is not written now
            self._completer.forget(run_id)
        if any(a.durable is not None and a.durable.deferred is not None for a in unfinished):
            await self._db(save_deferred, unfinished)  # a last step taken after the stop: kept
        reason = f"worker {self.id} shut down before the run finished"
        try:
            back = await self._db(self.store.hand_back, held, reason)
        except DatabaseError as exc:
            message = f"could not hand back {len(held)} run(s) ({exc}); they will be rescued when their lease expires"
            log_event(log, logging.ERROR, "hand_back_failed", message, worker=self.id, run_ids=_ids(held))
            return False
        tasks = {a.claim.id: a.claim.task for a in unfinished}
        for run_id in sorted(back):  # a run claimed ahead and never started: info, not a warning
            task = tasks.get(run_id)
            what, level = (f"run {run_id} {task}", logging.WARNING) if task else (f"run {run_id}", logging.INFO)
            how = "before it finished" if task else "before it started (held, claimed ahead)"
            message = f"{what} handed back: worker {self.id} shut down {how}; another worker takes it at its due time"
            log_event(log, level, "run_handed_back", message, run_id=str(run_id), worker=self.id)
        return True

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


def _ids(held: list[tuple[int, int]]) -> list[str]:
    return [str(run_id) for run_id, _ in held]
