"""Event hooks: `@app.on("run_failed")` callbacks, delivered off the worker's loop.

The worker only *emits*: a dictionary lookup when nobody listens, else a counted slot in a
bounded backlog and one `call_soon_threadsafe`. Everything else happens on a dispatcher
thread with its own event loop: it fetches the stored record (the `Run` as written, or the
schedule), then hands the event to each interested hook. Every hook has its own queue and
consumer, so a slow hook delays only itself; each call is time-limited (async hooks are
cancelled, sync hooks run on daemon threads and are abandoned), and an exception is logged.
When the backlog is full, new events are dropped with a counted warning: a hook can never
slow a worker down or make it run out of memory.

Each event fires once, in the worker that caused it: the worker whose token-checked write
recorded the outcome (a result discarded because the lease was lost fires nothing), the
worker whose rescue sweep took a run back (`run_rescued`, then `run_retrying`, `run_failed`
or `run_cancelled`), the worker whose materialization skipped ticks under the misfire policy
(`schedule_misfired` once, then `run_skipped` per recorded tick), the worker that recorded a
tick its `by=` cannot key skipped (`run_skipped`, from its ticker or its next poll).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .errors import ConfigurationError, did_you_mean
from .executor import DaemonPool
from .models import Run, ScheduleInfo
from .stores.base import RunFilter

if TYPE_CHECKING:
    from .app import App

log = logging.getLogger("rota.events")
T = TypeVar("T")

EVENTS = (
    "run_succeeded",
    "run_failed",
    "run_retrying",
    "run_rescued",
    "run_skipped",
    "run_cancelled",
    "schedule_misfired",
    "worker_started",
    "worker_stopped",
)
#: The event a written outcome fires, by the status it wrote.
OUTCOME_EVENTS = {
    "succeeded": "run_succeeded",
    "failed": "run_failed",
    "pending": "run_retrying",
    "cancelled": "run_cancelled",
}
#: notify_on= words of a schedule and the events they select.
NOTIFY_ON = {
    "success": ("run_succeeded",),
    "failure": ("run_failed",),
    "retry": ("run_retrying",),
    "cancel": ("run_cancelled",),
    "skip": ("run_skipped", "schedule_misfired"),
}
DEFAULT_TIMEOUT = 10.0


@dataclass(frozen=True)
class Event:
    """What a hook receives. `run` is the stored run (as the worker's write left it) for
    run_* events; `schedule` the stored schedule for schedule_misfired; `detail` says why
    (the rescue's message, the misfire reason). Both records are None when they could not be
    read (the database was unavailable, or the run was pruned meanwhile)."""

    name: str
    time: datetime
    worker_id: str | None
    run_id: str | None = None
    schedule_name: str | None = None
    detail: str | None = None
    run: Run | None = None
    schedule: ScheduleInfo | None = None

    @property
    def task(self) -> str | None:
        return self.run.task if self.run is not None else None


@dataclass(slots=True)
class _Raw:
    """An event as emitted by the worker, before its records are fetched."""

    name: str
    time: datetime
    worker_id: str | None
    run_id: int | None
    schedule: str | None
    tick: datetime | None
    detail: str | None


class Notifier(Protocol):
    """What `app.add_notifier` accepts (see rota.notify)."""

    def wants(self, event: Event, notify_on: Mapping[str, tuple[str, ...]]) -> bool: ...

    async def deliver(self, event: Event) -> None: ...


@dataclass(eq=False)
class _Hook:
    fn: Callable[[Event], Any]
    names: frozenset[str]
    timeout: float | None
    label: str
    is_async: bool
    notifier: Notifier | None = None
    queue: asyncio.Queue[Event] | None = field(default=None, repr=False)
    # Sync hooks get their own threads: one that hangs can only starve itself.
    pool: DaemonPool = field(default_factory=lambda: DaemonPool(4, "rota-hook"), repr=False)


def check_events(names: Sequence[str], what: str = "event") -> frozenset[str]:
    """The names, validated: an unknown one is refused, listing the valid ones."""
    for name in names:
        if not isinstance(name, str) or name not in EVENTS:
            hint = did_you_mean(name, EVENTS) if isinstance(name, str) else ""
            raise ConfigurationError(f"unknown {what} {name!r}{hint}; valid: {', '.join(EVENTS)}")
    return frozenset(names)


def check_notify_on(value: object) -> tuple[str, ...] | None:
    """A schedule's notify_on=: a tuple of words from NOTIFY_ON (None: not given)."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, (tuple, list, set, frozenset)):
        raise ConfigurationError(
            f"notify_on must be a tuple of {', '.join(NOTIFY_ON)}, e.g. ('failure',), got {value!r}"
        )
    for word in value:
        if word not in NOTIFY_ON:
            raise ConfigurationError(f"unknown notify_on value {word!r}; valid: {', '.join(NOTIFY_ON)}")
    return tuple(value)


class Events:
    """The hooks of one App and the dispatcher that delivers to them (`app.events`)."""

    def __init__(self, app: App, *, backlog: int = 1000) -> None:
        self._app = app
        self.backlog = backlog
        self.hooks: list[_Hook] = []
        self.notify_on: dict[str, tuple[str, ...]] = {}  # schedule name -> notify_on words
        self._wanted: frozenset[str] = frozenset()
        self._lock = threading.Condition()
        self._pending = 0  # deliveries not finished yet (an emitted event counts one until fanned out)
        self.dropped = 0
        self.failures = 0
        self.timeouts = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inbox: asyncio.Queue[_Raw] | None = None
        self._threads = DaemonPool(4, "rota-events")  # reading records

    # -- registering ---------------------------------------------------------------------
    def on(
        self, *names: str, timeout: float | None = DEFAULT_TIMEOUT
    ) -> Callable[[Callable[[Event], T]], Callable[[Event], T]]:
        """Decorator: call the function (sync or async) with an Event for each named event."""
        if not names:
            raise ConfigurationError(f"@app.on needs at least one event name; valid: {', '.join(EVENTS)}")
        wanted = check_events(names)
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
            raise ConfigurationError(f"hook timeout must be a positive number of seconds or None, got {timeout!r}")

        def register(fn: Callable[[Event], T]) -> Callable[[Event], T]:
            if not callable(fn):
                raise ConfigurationError(f"@app.on needs a function, got {fn!r}")
            label = getattr(fn, "__qualname__", repr(fn))
            self._add(_Hook(fn, wanted, timeout, label, inspect.iscoroutinefunction(fn)))
            return fn

        return register

    def add_notifier(self, notifier: Notifier) -> None:
        if not (callable(getattr(notifier, "wants", None)) and callable(getattr(notifier, "deliver", None))):
            raise ConfigurationError(f"a notifier needs wants() and deliver() (see rota.notify), got {notifier!r}")

        async def notify(event: Event) -> None:
            if notifier.wants(event, self.notify_on):
                await notifier.deliver(event)

        # No time limit here: a notifier bounds each attempt itself (timeout x retries).
        self._add(_Hook(notify, frozenset(), None, repr(notifier), True, notifier))

    def set_notify_on(self, schedule: str, words: Sequence[str] | None) -> None:
        """Which events notifiers send for the runs of `schedule` (see rota.notify); None:
        their own `events=`."""
        checked = check_notify_on(words)
        with self._lock:
            if checked is None:
                self.notify_on.pop(schedule, None)
            else:
                self.notify_on[schedule] = checked
            self._refresh()

    def _add(self, hook: _Hook) -> None:
        with self._lock:
            self.hooks.append(hook)
            self._refresh()
            loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(self._start_consumer, hook)

    def _refresh(self) -> None:
        """Recompute which events anyone listens to (under the lock). A notifier listens to
        its own events and those any schedule's notify_on selects: events nobody wants are
        not even emitted, so a notifier for failures costs nothing per successful run."""
        selected = {name for words in self.notify_on.values() for word in words for name in NOTIFY_ON[word]}
        for hook in self.hooks:
            if hook.notifier is not None:
                hook.names = frozenset(getattr(hook.notifier, "events", EVENTS)) | selected
        self._wanted = frozenset().union(*(hook.names for hook in self.hooks))

    def wants(self, name: str) -> bool:
        return name in self._wanted

    # -- emitting (any thread, never blocks) ---------------------------------------------
    def emit(
        self,
        name: str,
        worker_id: str | None,
        *,
        run_id: int | None = None,
        schedule: str | None = None,
        tick: datetime | None = None,
        detail: str | None = None,
    ) -> None:
        if name not in self._wanted:
            return
        with self._lock:
            full = self._pending >= self.backlog
            if full:
                self.dropped += 1
                dropped = self.dropped
            else:
                self._pending += 1
        if full:
            if dropped == 1 or dropped % 100 == 0:
                log.warning(
                    "event hooks are %d deliveries behind: dropped %s (%d event(s) dropped so far)",
                    self.backlog,
                    name,
                    dropped,
                )
            return
        raw = _Raw(name, datetime.now(UTC), worker_id, run_id, schedule, tick, detail)
        try:
            self._ensure_loop().call_soon_threadsafe(self._accept, raw)
        except RuntimeError:  # closed meanwhile
            self._done(1)

    def drain(self, timeout: float = 5.0) -> bool:
        """Wait until every emitted event has been delivered (or given up); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._lock.wait(remaining)
        return True

    def close(self, timeout: float = 2.0) -> None:
        """Deliver what is queued (up to `timeout`), then stop the dispatcher thread."""
        if self._loop is None:
            return
        self.drain(timeout)
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(loop.stop)

    # -- the dispatcher thread -----------------------------------------------------------
    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        """The dispatcher's loop, started on first use. Never waits: callbacks queued before
        the thread runs are run first thing, in order."""
        with self._lock:
            if self._loop is not None:
                return self._loop
            loop = asyncio.new_event_loop()
            self._loop = loop
        loop.call_soon_threadsafe(self._setup)

        def main() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_forever()
            finally:
                for task in asyncio.all_tasks(loop):
                    task.cancel()
                with contextlib.suppress(Exception):
                    loop.run_until_complete(asyncio.sleep(0))
                loop.close()

        threading.Thread(target=main, name="rota-events", daemon=True).start()
        return loop

    def _setup(self) -> None:
        self._inbox = asyncio.Queue()
        for hook in list(self.hooks):
            self._start_consumer(hook)
        asyncio.get_running_loop().create_task(self._fan_out(self._inbox))

    def _accept(self, raw: _Raw) -> None:
        assert self._inbox is not None
        self._inbox.put_nowait(raw)

    def _start_consumer(self, hook: _Hook) -> None:
        if hook.queue is None:
            hook.queue = asyncio.Queue()
            asyncio.get_running_loop().create_task(self._consume(hook, hook.queue))

    async def _fan_out(self, inbox: asyncio.Queue[_Raw]) -> None:
        """Fetch each event's records (off this loop), then queue it for each interested hook."""
        while True:
            raw = await inbox.get()
            try:
                event = await self._in_thread(self._build, raw)
            except Exception as exc:
                log.warning("%s: could not read its record (%s); hooks get the event without it", raw.name, exc)
                event = self._bare(raw)
            stored = _contradiction(event)
            if stored is not None:
                log.warning("%s of run %s not delivered: the run is stored as %s", event.name, event.run_id, stored)
                self._done(1)
                continue
            targets = [h for h in self.hooks if raw.name in h.names and h.queue is not None]
            with self._lock:
                self._pending += len(targets)
            for hook in targets:
                assert hook.queue is not None
                hook.queue.put_nowait(event)
            self._done(1)

    async def _consume(self, hook: _Hook, queue: asyncio.Queue[Event]) -> None:
        while True:
            event = await queue.get()
            try:
                await self._call(hook, event)
            finally:
                self._done(1)

    async def _call(self, hook: _Hook, event: Event) -> None:
        try:
            if hook.is_async:
                await asyncio.wait_for(hook.fn(event), hook.timeout)
            else:
                await asyncio.wait_for(self._in_thread(hook.fn, event, pool=hook.pool), hook.timeout)
        except TimeoutError:
            self.timeouts += 1
            log.error(
                "hook %s for %s (run %s) did not finish within %s s; abandoned",
                hook.label,
                event.name,
                event.run_id,
                hook.timeout,
            )
        except Exception:
            self.failures += 1
            log.exception("hook %s for %s (run %s) raised", hook.label, event.name, event.run_id)

    async def _in_thread(self, fn: Callable[..., T], *args: Any, pool: DaemonPool | None = None) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()

        def settle(result: Any, exc: BaseException | None) -> None:
            if future.done():
                return
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(result)

        def call() -> None:
            try:
                result = fn(*args)
            except BaseException as exc:
                outcome: tuple[Any, BaseException | None] = (None, exc)
            else:
                outcome = (result, None)
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, *outcome)

        (pool or self._threads).submit(call)
        return await future

    def _done(self, n: int) -> None:
        with self._lock:
            self._pending -= n
            if self._pending <= 0:
                self._lock.notify_all()

    # -- records (on a dispatcher thread) ------------------------------------------------
    def _bare(self, raw: _Raw) -> Event:
        return Event(
            raw.name,
            raw.time,
            raw.worker_id,
            str(raw.run_id) if raw.run_id is not None else None,
            raw.schedule,
            raw.detail,
        )

    def _build(self, raw: _Raw) -> Event:
        store = self._app.store
        run: Run | None = None
        schedule: ScheduleInfo | None = None
        if raw.run_id is not None:
            run = store.get_run(raw.run_id)
        elif raw.name == "run_skipped" and raw.schedule is not None and raw.tick is not None:
            run = _skipped_run(self._app, raw.schedule, raw.tick)
        if raw.name == "schedule_misfired" and raw.schedule is not None:
            schedule = store.get_schedule(raw.schedule)
        run_id = run.id if run is not None else (str(raw.run_id) if raw.run_id is not None else None)
        name = raw.schedule if raw.schedule is not None else (run.schedule if run is not None else None)
        return Event(raw.name, raw.time, raw.worker_id, run_id, name, raw.detail, run, schedule)


_FINAL_EVENTS = {"run_succeeded": "succeeded", "run_failed": "failed", "run_cancelled": "cancelled"}


def _contradiction(event: Event) -> str | None:
    """The stored status when it contradicts a final outcome (final statuses never change:
    the worker could not tell whether its write landed); never fire for what did not happen."""
    expected = _FINAL_EVENTS.get(event.name)
    if expected is None or event.run is None or event.run.status == expected:
        return None
    return event.run.status


def _skipped_run(app: App, schedule: str, tick: datetime) -> Run | None:
    """The run recorded for a skipped tick (skipped ticks are inserted without returning ids)."""
    for run in app.store.list_runs(RunFilter(status="skipped", schedule=schedule, limit=200)):
        if abs((run.scheduled_for - tick).total_seconds()) < 0.001:  # stored precision
            return run
    return None


__all__ = ["EVENTS", "NOTIFY_ON", "Event", "Events", "Notifier", "check_events", "check_notify_on"]
