"""The worker's lifecycle controls: start on a thread, stop (thread-safe), signals, and
the graceful shutdown: stop claiming (and making ticks), withdraw the runs this worker made
ahead of a tick not come yet (see ticks.py), hand back the runs it holds (claimed, never
started), drain up to `shutdown_timeout`, hand unfinished runs back (pending again at once, the attempt not counted), flush outcomes, release this
process's named locks, mark the worker stopped. A second signal skips the drain."""

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
from .claims import Finisher
from .completer import Completer
from .db import Db
from .executors import Executors
from .prefetch import Prefetch
from .service import wait_event
from .ticks import Ticker
from .view import WorkerView
from .wakeups import DueTimes

log = logging.getLogger("rota.worker")


class Lifecycle:
    """Start/stop/drain/hand back for `Worker` (which sets these fields up)."""

    app: WorkerView
    id: str
    state: str
    shutdown_timeout: float
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
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(asyncio.shield(poll), 5)
        await self._withdraw_ticks_ahead(background)
        held = self._prefetch.take_all()  # held runs: handed back before the drain, not after it
        if not await self._give_back([], held):
            self._prefetch.hold_all(held, time.monotonic())  # renewed meanwhile; tried again after the drain
        await self._drain()
        await self._hand_back_unfinished()
        await self._completer.wait_idle()  # let a write in progress (the completer's) finish first
        for _ in range(3):
            if await self._flush():
                break
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await self._db(self.app.release_process_locks)
        await self._mark_stopped()

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

    async def _hand_back_unfinished(self) -> None:
        """After the drain: the unfinished runs, pending again at once for another worker,
        the attempt not counted. A limited run already past its timeout (its thread still
        runs, see ThreadExecutor._on_timeout) is recorded timed out instead: its attempt
        counts, so a handler that always hangs uses up its retries across restarts."""
        unfinished = list(self._executors.inflight.values())
        for active in unfinished:
            self._executors.stop(active, lost=False)
            self._finisher.complete(active, ("timeout", None) if active.timed_out else ("lost", None))
        await self._give_back([a for a in unfinished if not a.timed_out], self._prefetch.take_all())

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
