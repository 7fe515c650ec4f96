"""Due times and wake-ups: when the next run and the next schedule tick are due (learned
from each poll, on this process's monotonic clock), and the store's nudges that make them
due now: LISTEN/NOTIFY on PostgreSQL, a cheap `data_version` watch on SQLite."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from ..errors import DatabaseError
from ..stores.base import PollState, Store


class DueTimes:
    """The board the poller, the claimer, the ticker and the wake-ups share explicitly."""

    def __init__(self) -> None:
        self.run_due: float | None = None  # monotonic
        self.schedule_due: float | None = None  # monotonic
        self.db_offset = timedelta(0)  # database clock minus local clock
        self.claimed_at = 0.0  # monotonic time of the last claim that found runs
        self.wake = asyncio.Event()  # the claimer: look for runs now
        self.tick_wake = asyncio.Event()  # the ticker: look at schedules now

    def bind(self) -> None:
        self.wake = asyncio.Event()
        self.tick_wake = asyncio.Event()

    def learn(self, state: PollState) -> None:
        """Translate due times on the database clock into this process's monotonic clock."""
        mono, db_now = time.monotonic(), state.now
        self.db_offset = db_now - datetime.now(UTC)
        run, sched = state.next_run_due, state.next_schedule_due
        self.run_due = None if run is None else mono + (run - db_now).total_seconds()
        self.schedule_due = None if sched is None else mono + (sched - db_now).total_seconds()

    def run_now(self) -> None:
        self.run_due = time.monotonic()
        self.wake.set()

    def schedule_now(self) -> None:
        self.schedule_due = time.monotonic()
        self.tick_wake.set()

    @staticmethod
    def due(at: float | None) -> bool:
        return at is not None and time.monotonic() >= at

    @staticmethod
    def until(*deadlines: float | None) -> float:
        soonest = min(d for d in deadlines if d is not None)
        return max(0.0, soonest - time.monotonic())


class Wakeups:
    """The listener task: store notifications become due times (or cancel requests)."""

    def __init__(self, store: Callable[[], Store], due: DueTimes, free_slots: Callable[[], int]) -> None:
        self.store = store
        self.due = due
        self.free_slots = free_slots
        self.cancel: Callable[[int], None] = lambda run_id: None
        self.loop: asyncio.AbstractEventLoop | None = None

    def on_wakeup(self, payload: str) -> None:
        """A store notification, on the loop."""
        if payload.startswith("cancel:"):
            with contextlib.suppress(ValueError):
                self.cancel(int(payload[7:]))
            return
        if payload == "schedule":
            self.due.schedule_now()
            return
        self.due.run_now()

    def notify_threadsafe(self, payload: str) -> None:
        loop = self.loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self.on_wakeup, payload)

    async def run(self) -> None:
        """Wake-ups from the store: LISTEN/NOTIFY on PostgreSQL, data_version on SQLite."""
        store = self.store()
        listen = getattr(store, "listen", None)
        if listen is not None:
            await listen(self.on_wakeup)
            return
        listeners = getattr(store, "listeners", None)
        if listeners is None:
            return
        listeners.append(self.notify_threadsafe)
        try:
            await self._watch_data_version(store)
        finally:
            listeners.remove(self.notify_threadsafe)

    async def _watch_data_version(self, store: Any) -> None:
        """Another process committed to the SQLite file: look for work (cheap, no disk I/O).
        Every 20 ms while runs keep coming, every 50 ms once none was claimed for 5 s (our
        own heartbeats also change the file, so "quiet" is judged by claims, not changes)."""
        seen = None
        while True:
            quiet = time.monotonic() - self.due.claimed_at > 5.0
            await asyncio.sleep(0.2 if not self.free_slots() else 0.05 if quiet else 0.02)
            try:
                version = store.data_version()
            except DatabaseError:
                continue
            if seen is not None and version != seen and self.free_slots():
                self.due.run_now()
            seen = version
