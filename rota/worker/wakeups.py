"""Due times and wake-ups: when the next run and the next schedule tick are due (learned
from each poll, on this process's monotonic clock), and the store's nudges that make them
due now: LISTEN/NOTIFY on PostgreSQL, a cheap `data_version` watch on SQLite, and on MySQL
that watch with a quicker probe between its looks (a new run is claimed at once)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from ..errors import DatabaseError
from ..stores.base import PollState, Store

log = logging.getLogger("rota.worker")
# Wake this much before a due run and step the loop (yielding) up to its due time: the
# event loop's timers round up to the millisecond (epoll), which made runs start up to 1 ms
# late; waking early costs at most this much of stepping per due run.
EARLY = 0.0015
# An idle worker claims the runs due within this long just before their due time, held, and
# starts each at its due time on its own clock (Claimer.claim_ahead): more than a claim's
# round trip after an idle spell (about 3 ms on PostgreSQL), short enough that holding a run
# keeps it from no other worker for long. A store may need longer (Store.claim_lead: MySQL's).
CLAIM_AHEAD = 0.02
# MySQL's quick probe (Store.change_probe: a new run, a claim): every QUICK_BUSY s while runs
# keep coming, QUICK_IDLE s once quiet; its whole probe (data_version: cancel requests, runs
# made due by another process's finish) every WHOLE s. A look's cost is mostly waking a thread
# on each side (measured on a loaded 2-core VM: an idle worker 1.2 % of a core and its server
# thread 1.3 %, against 1.0 % and 0.3 % with the whole probe alone every 50 ms; 5 ms busy and
# 10 ms idle looks cost 1.8 % and 1.7 %: bench/results/mysql-pickup-2026-12-07.md).
QUICK_BUSY = 0.01
QUICK_IDLE = 0.02
WHOLE = 0.1
# A look that failed (the database away) is tried again after LOOK_BACKOFF s, doubling up to
# LOOK_BACKOFF_MAX: each failed look may open a connection (TLS context and all), and at
# QUICK_BUSY that spun most of a core for as long as an outage lasted.
LOOK_BACKOFF = 0.05
LOOK_BACKOFF_MAX = 1.0
# The database clock is learned from several polls (see DueTimes.learn).
_CLOCK_SAMPLES = 8


class DueTimes:
    """The board the poller, the claimer, the ticker and the wake-ups share explicitly."""

    def __init__(self) -> None:
        self.run_due: float | None = None  # monotonic
        self.schedule_due: float | None = None  # monotonic
        self.schedule_due_at: datetime | None = None  # the same, on the database clock
        self.db_offset = timedelta(0)  # database clock minus local clock
        self.claimed_at = 0.0  # monotonic time of the last claim that found runs
        self.claim_ahead = CLAIM_AHEAD  # 0: claim runs at their due time only
        self.ahead_upto = 0.0  # monotonic: the runs due by then were claimed ahead (or tried)
        self.wake = asyncio.Event()  # the claimer: look for runs now
        self.tick_wake = asyncio.Event()  # the ticker: look at schedules now
        self._clock: collections.deque[float] = collections.deque(maxlen=_CLOCK_SAMPLES)

    def bind(self) -> None:
        self.wake = asyncio.Event()
        self.tick_wake = asyncio.Event()

    def learn(self, state: PollState) -> None:
        """Translate due times on the database clock into this process's monotonic clock. A
        tick sooner than the one known wakes the ticker, asleep until that one or its poll:
        whoever read it (on MySQL, the claim at once on a new run may learn that another
        process rewound a tick, as a worker stopping inside the lead does)."""
        db_now = state.now
        self.db_offset = db_now - datetime.now(UTC)
        offset = self.learn_clock(db_now.timestamp(), time.monotonic())
        run, sched = state.next_run_due, state.next_schedule_due
        sooner = sched is not None and (self.schedule_due_at is None or sched < self.schedule_due_at)
        self.run_due = None if run is None else run.timestamp() - offset
        self.schedule_due = None if sched is None else sched.timestamp() - offset
        self.schedule_due_at = sched
        if sooner:
            self.tick_wake.set()  # the ticker re-arms its sleep for the sooner tick

    def learn_clock(self, db_epoch: float, mono: float) -> float:
        """The database clock minus the monotonic clock, from a reading taken at `mono`.

        `mono` is read after the round trip, so each sample is low by that reply's delay
        (and any wait for the loop): the highest of the last few samples is the closest to
        the truth, so one slow reply does not make the next runs start late. A step of
        the database clock (or a new database) moves the estimate as soon as it is lower
        than every recent sample or within a few polls."""
        sample = db_epoch - mono
        if self._clock and sample < min(self._clock) - 1.0:
            self._clock.clear()  # the database clock stepped back (or another database)
        self._clock.append(sample)
        return max(self._clock)

    def mono_of(self, db_epoch: float) -> float:
        """A time on the database clock (epoch seconds) on this process's monotonic clock."""
        if self._clock:
            return db_epoch - max(self._clock)
        return time.monotonic() + db_epoch - time.time() - self.db_offset.total_seconds()

    def run_at(self, db_epoch: float) -> None:
        """A run is due at `db_epoch` (a wake-up said so): wake the claimer then, if that is
        sooner than it would otherwise look."""
        at = self.mono_of(db_epoch)
        if self.run_due is None or at < self.run_due:
            self.run_due = at
            self.wake.set()  # the claimer re-arms its sleep for the sooner time

    def run_now(self) -> None:
        self.run_due = time.monotonic()
        self.wake.set()

    def schedule_now(self) -> None:
        self.schedule_due = time.monotonic()
        self.tick_wake.set()

    @staticmethod
    def due(at: float | None) -> bool:
        return at is not None and time.monotonic() >= at

    def until(self, *deadlines: float | None) -> float:
        """Seconds to wait for the soonest deadline; for the due run, EARLY less (the
        caller's loop then steps up to it: see EARLY), or CLAIM_AHEAD less if it was not
        claimed ahead yet."""
        soonest = min(d for d in deadlines if d is not None)
        left = soonest - time.monotonic()
        if soonest == self.run_due:
            left -= EARLY if soonest <= self.ahead_upto else max(EARLY, self.claim_ahead)
        return max(0.0, left)

    def ahead_due(self) -> bool:
        """Whether the next run is due within the claim-ahead lead and was not tried yet."""
        at = self.run_due
        return at is not None and at > self.ahead_upto and at - time.monotonic() <= self.claim_ahead


def _newer_run(version: Any, before: Any) -> bool:
    """Whether a whole look saw a new run (MySQL's data_version starts with the newest run
    id; SQLite's is one number, a commit of any kind). A lower newest id is no new run: the
    newest run was deleted (a run made ahead and withdrawn by a stopping worker)."""
    return isinstance(version, tuple) and isinstance(before, tuple) and version[:1] > before[:1]


def _other_change(version: Any, before: Any, newer: bool) -> bool:
    """Whether a whole look saw more than a new run: SQLite's number says only that
    something changed; MySQL's tuple ends with the due runs, which a new run moves too (its
    claim, told at once, takes what is due: no read of it first), so with a new run only
    the tick, the claims and the cancellations count."""
    if not isinstance(version, tuple) or not isinstance(before, tuple):
        return True
    return version[1:-1] != before[1:-1] if newer else version[1:] != before[1:]


class _Seen:
    """What the watch thread's whole looks saw (data_version, and the last one read whole)."""

    def __init__(self) -> None:
        self.version: Any = None
        self.looked: Any = None


class Wakeups:
    """The listener task: store notifications become due times (or cancel requests)."""

    def __init__(self, store: Callable[[], Store], due: DueTimes, free_slots: Callable[[], int]) -> None:
        self.store = store
        self.due = due
        self.free_slots = free_slots
        self.cancel: Callable[[int], None] = lambda run_id: None
        self.owner = ""  # this worker's id: the owner of the runs it holds
        self.holding: Callable[[], bool] = lambda: False  # it holds runs (a cancel may concern them)
        self._told: set[int] = set()  # cancel requests passed on (the watch thread's)
        self._seen: set[str] = set()  # what the watch thread saw since the loop last looked
        self._look_failed = 0  # the watch thread's looks that failed in a row (the database away)
        self.refresh: Callable[[], Awaitable[None]] | None = None  # learn due times (poll_state)
        self.loop: asyncio.AbstractEventLoop | None = None

    def on_wakeup(self, payload: str) -> None:
        """A store notification, on the loop: `run` (a run is due now), `run:<epoch>` (a
        run is due then, on the database clock), `schedule`, `cancel:<run id>`."""
        kind, _, arg = payload.partition(":")
        if kind == "cancel":
            with contextlib.suppress(ValueError):
                self.cancel(int(arg))
            return
        if kind == "schedule":
            self.due.schedule_now()
            return
        if arg:
            with contextlib.suppress(ValueError):
                self.due.run_at(float(arg))
                return
        self.due.run_now()

    def notify_threadsafe(self, payload: str) -> None:
        loop = self.loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self.on_wakeup, payload)

    async def run(self) -> None:
        """Wake-ups from the store: LISTEN/NOTIFY on PostgreSQL, data_version on SQLite (and
        change_probe between its looks on MySQL)."""
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
        """Another process committed: learn when the next run and tick are due (a read, not
        a claim; the claimer then claims now or sleeps until then), or, when the quick probe
        saw a new run (MySQL), claim at once. A thread looks (`_look`) and wakes the loop
        only when something changed: an idle worker's loop sleeps (a loop wake-up costs
        about twice a thread's: measured 0.46 % against 0.25 % of a core at 20 looks a
        second, W12 in bench/flow_idle.py)."""
        loop = asyncio.get_running_loop()
        changed = asyncio.Event()
        stop = threading.Event()
        look = threading.Thread(
            target=self._look, args=(store, loop, changed, stop), name="rota-data-version", daemon=True
        )
        look.start()
        try:
            while True:
                await changed.wait()
                changed.clear()
                kinds, self._seen = self._seen, set()
                if not self.free_slots():
                    continue
                if "run" in kinds:
                    self.due.run_now()  # claim at once: the claim learns what is due after it
                if "change" in kinds:  # (a tick moved, a run made due: learned by a read)
                    await self._changed()
        finally:
            stop.set()
            look.join(0.5)  # at once (stop is set; a PRAGMA takes no lock): ended before the store closes

    def _look(self, store: Any, loop: asyncio.AbstractEventLoop, changed: asyncio.Event, stop: threading.Event) -> None:
        """On the watch thread: look at `data_version` every `_every()` seconds, and with a
        store that has a quick probe (MySQL: `change_probe`), at that probe in between (every
        QUICK_BUSY or QUICK_IDLE s while a slot is free) and at `data_version` every WHOLE s."""
        quick = getattr(store, "change_probe", None)
        whole = _Seen()
        quick_seen: Any = None
        whole_at = 0.0
        try:
            while not stop.wait(self._look_wait(quick is not None)) and not loop.is_closed():
                if quick is not None and self.free_slots() and time.monotonic() < whole_at:
                    quick_seen = self._quick_look(quick, quick_seen, loop, changed)
                    continue
                whole_at = time.monotonic() + WHOLE
                self._whole_look(store, whole, loop, changed)
        finally:
            release = getattr(store, "release_thread", None)
            if release is not None:
                release()

    def _quick_look(
        self, probe: Callable[[], tuple[int, int]], seen: Any, loop: asyncio.AbstractEventLoop, changed: asyncio.Event
    ) -> Any:
        """The newest run id and the token counter: a new run is claimed at once (`run`), a
        claim elsewhere makes the loop learn what is due (`change`). Returns what it saw."""
        try:
            now = probe()
        except Exception as exc:  # the database away, or closing: look again later
            self._look_failed += 1
            log.debug("change_probe: %s", exc)
            return seen
        self._look_failed = 0
        if seen is not None and now != seen:
            self._tell(loop, changed, "run" if now[0] > seen[0] else "change")
        return now

    def _whole_look(self, store: Any, seen: _Seen, loop: asyncio.AbstractEventLoop, changed: asyncio.Event) -> None:
        """data_version, and the cancel requests after a change. A change seen while no slot
        is free is kept for when one frees (`seen.version` stays behind)."""
        try:
            version = store.data_version()
        except Exception as exc:  # the database away, or closing: look again later
            self._look_failed += 1
            log.debug("data_version: %s", exc)
            return
        self._look_failed = 0
        if version == seen.looked or self._cancels(store, loop):  # the first look reads them too
            seen.looked = version  # else (the read failed) read again at the next look
        if seen.version is None:  # the first look: a run enqueued after the worker's first
            # claim but before this look is in the baseline; one more look at what is due
            if self.free_slots():
                self._tell(loop, changed, "change")
        elif version != seen.version:
            if not self.free_slots():
                return
            newer = _newer_run(version, seen.version)
            if newer:
                self._tell(loop, changed, "run")
            if _other_change(version, seen.version, newer):
                self._tell(loop, changed, "change")  # (a schedule moved, a run became due...)
        seen.version = version

    def _tell(self, loop: asyncio.AbstractEventLoop, changed: asyncio.Event, kind: str) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: the worker stopped
            loop.call_soon_threadsafe(self._mark, changed, kind)

    def _mark(self, changed: asyncio.Event, kind: str) -> None:
        """On the loop: what the watch thread saw, for `_watch_data_version`."""
        self._seen.add(kind)
        changed.set()

    def _cancels(self, store: Any, loop: asyncio.AbstractEventLoop) -> bool:
        """On the watch thread, after a change: another process may have asked to cancel a
        run this worker holds (PostgreSQL says so by NOTIFY; SQLite cannot). One read of the
        running runs, only while this worker holds some; each request passed on once."""
        if not self.holding():
            self._told = set()
            return True
        try:
            requested = store.cancel_requests(self.owner)
        except Exception as exc:  # the database away, or closing: read again at the next look
            log.debug("cancel requests: %s", exc)
            return False
        for run_id in requested - self._told:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the worker stopped
                loop.call_soon_threadsafe(self.on_wakeup, f"cancel:{run_id}")
        self._told = requested
        return True

    def _look_wait(self, quick: bool) -> float:
        """The watch thread's wait before its next look: `_every`, or after looks that failed
        in a row a backoff (LOOK_BACKOFF doubling up to LOOK_BACKOFF_MAX; the poll still claims
        meanwhile)."""
        every = self._every(quick)
        if not self._look_failed:
            return every
        return max(every, min(LOOK_BACKOFF_MAX, LOOK_BACKOFF * 2.0 ** min(self._look_failed - 1, 8)))

    def _every(self, quick: bool = False) -> float:
        """Every 20 ms while runs keep coming, every 50 ms once none was claimed for 5 s
        (our own heartbeats also change the file, so "quiet" is judged by claims, not
        changes), every 200 ms while no slot is free. With a quick probe (MySQL): every
        QUICK_BUSY s while runs keep coming, QUICK_IDLE s once quiet (data_version every
        WHOLE s among them), every 200 ms while no slot is free."""
        if not self.free_slots():
            return 0.2
        quiet = time.monotonic() - self.due.claimed_at > 5.0
        if quick:
            return QUICK_IDLE if quiet else QUICK_BUSY
        return 0.05 if quiet else 0.02

    async def _changed(self) -> None:
        if self.refresh is None:
            self.due.run_now()
            return
        try:
            await self.refresh()
        except DatabaseError:
            self.due.run_now()  # the claimer's own path reports the error
            return
        self.due.wake.set()  # claim now, or sleep until the run learned is due
        self.due.tick_wake.set()
