"""Tasks and their options (the context a handler may receive and handles to enqueued runs
are in rota.runs, re-exported here)."""

from __future__ import annotations

import asyncio
import inspect
import math
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from . import tracing
from .errors import ConfigurationError
from .limits import Limit, Rate, gate, stamp
from .runs import RunContext as RunContext
from .runs import RunHandle as RunHandle
from .serialization import call_signature, check_call, check_text, encode_arguments
from .stores.base import NewRun

if TYPE_CHECKING:
    from .app import App

P = ParamSpec("P")
R = TypeVar("R")

Call = tuple[Sequence[Any], Mapping[str, Any]]
# \A and \Z, not ^ and $: "$" also matches before a final newline, so "q\n" would pass.
_QUEUE_NAME = re.compile(r"\A[A-Za-z0-9_.:\-]{1,100}\Z")
# The latest time a run may be due: every store and every display (in any zone) can hold it.
LATEST = datetime(9999, 1, 1, tzinfo=UTC)
# The earliest run_at: a time in the past is due at once, and before the Unix epoch a time
# may not be shown in every zone or read back on every platform (year 1 west of UTC is not).
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
# The longest retry delay: a backoff past it is a typo, and its due time must stay readable.
MAX_BACKOFF = 366 * 86400.0
ISOLATIONS = ("none", "process")


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before retry n (1-based): min(max, base * factor**(n-1)), then +-jitter.

    `Backoff(base=5, factor=1, jitter=0)` is a fixed 5 s delay. Jitter is a fraction (0.1 =
    up to 10 % either way) so that many failing runs do not retry in lockstep."""

    base: float = 1.0
    factor: float = 2.0
    max: float = 300.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        for name in ("base", "max"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= MAX_BACKOFF:
                raise ConfigurationError(
                    f"backoff {name} must be a number of seconds from 0 to {MAX_BACKOFF:.0f} (366 days), got {value!r}"
                )
        if not isinstance(self.factor, (int, float)) or isinstance(self.factor, bool) or not 1 <= self.factor <= 100:
            raise ConfigurationError(f"backoff factor must be between 1 and 100, got {self.factor!r}")
        if not isinstance(self.jitter, (int, float)) or isinstance(self.jitter, bool) or not 0 <= self.jitter <= 1:
            raise ConfigurationError(f"backoff jitter must be a fraction between 0 and 1, got {self.jitter!r}")

    def delay(self, retry: int) -> float:
        raw = min(self.max, self.base * self.factor ** max(0, retry - 1))
        if self.jitter:
            raw *= 1 + random.uniform(-self.jitter, self.jitter)
        return max(0.0, raw)

    def to_json(self) -> dict[str, float]:
        return {"base": self.base, "factor": self.factor, "max": self.max, "jitter": self.jitter}

    @classmethod
    def from_json(cls, data: Mapping[str, float]) -> Backoff:
        return cls(**data)

    @classmethod
    def coerce(cls, value: Backoff | float | int | timedelta | None) -> Backoff:
        if value is None:
            return cls()
        if isinstance(value, Backoff):
            return value
        if isinstance(value, timedelta):
            value = value.total_seconds()
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return cls(base=float(value), factor=1.0, max=max(float(value), 0.0), jitter=0.0)
        raise ConfigurationError(
            f"invalid backoff {value!r}: use seconds (a fixed delay), a timedelta, or rota.Backoff(base=, factor=, max=, jitter=)"
        )


@dataclass(frozen=True, slots=True)
class TaskOptions:
    """Everything that says how a task's runs are executed. Validated on construction."""

    queue: str = "default"
    priority: int = 0
    retries: int = 0
    backoff: Backoff = field(default_factory=Backoff)
    timeout: float | None = None
    retry_on: tuple[type[BaseException], ...] | None = None
    pass_context: bool = False
    isolation: str = "none"
    transactional: bool = False  # rota.transactional; implies pass_context (ctx.connection)
    limit: Limit | None = None  # rota.Limit (an int n means Limit(n)); see rota.limits
    rate: Rate | None = None  # rota.Rate

    def __post_init__(self) -> None:
        if self.transactional is not False:
            from .transactional import check_options

            check_options(self)
        check_queue(self.queue)
        check_int("priority", self.priority, low=-1_000_000, high=1_000_000)
        check_int("retries", self.retries, low=0, high=1000)
        check_timeout(self.timeout)
        object.__setattr__(self, "limit", Limit.coerce(self.limit))
        object.__setattr__(self, "rate", Rate.coerce(self.rate))
        if self.isolation not in ISOLATIONS:
            raise ConfigurationError(f"unknown isolation {self.isolation!r}; valid values are 'none', 'process'")
        if self.retry_on is not None:
            for exc_type in self.retry_on:
                if not (isinstance(exc_type, type) and issubclass(exc_type, BaseException)):
                    raise ConfigurationError(f"retry_on must list exception classes, got {exc_type!r}")

    @property
    def max_attempts(self) -> int:
        return self.retries + 1

    def merged(self, **overrides: Any) -> TaskOptions:
        changes = {k: v for k, v in overrides.items() if v is not None}
        if "backoff" in changes:
            changes["backoff"] = Backoff.coerce(changes["backoff"])
        if "timeout" in changes and isinstance(changes["timeout"], timedelta):
            changes["timeout"] = changes["timeout"].total_seconds()
        if "retry_on" in changes:
            changes["retry_on"] = _retry_on(changes["retry_on"])
        return replace(self, **changes)


def _retry_on(value: object) -> tuple[Any, ...]:
    """retry_on as a tuple: one exception class, or any iterable of them (each checked by
    TaskOptions); a name given as a string is refused whole, not letter by letter."""
    if isinstance(value, type):
        return (value,)
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        raise ConfigurationError(
            f"retry_on must be an exception class or a tuple of them, got {value!r}"
            + (f": pass the class itself, e.g. retry_on=({value},)" if isinstance(value, str) else "")
        )
    return tuple(value)


def check_queue(queue: object) -> str:
    if not isinstance(queue, str) or not _QUEUE_NAME.match(queue):
        raise ConfigurationError(
            f"invalid queue name {queue!r}: use 1-100 letters, digits, '_', '-', '.' or ':' "
            f"(the pattern {_QUEUE_NAME.pattern})"
        )
    return queue


def check_int(name: str, value: object, *, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ConfigurationError(f"{name} must be an integer from {low} to {high}, got {value!r}")
    return value


def check_timeout(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise ConfigurationError(f"timeout must be a positive number of seconds (or None for no limit), got {value!r}")
    return float(value)


class Task(Generic[P, R]):
    """A registered task type. Call it to run inline; `enqueue` to run it on a worker."""

    def __init__(self, app: App, fn: Callable[..., Any], name: str, options: TaskOptions) -> None:
        self.app = app
        self.fn = fn
        self.name = name
        self.opts = options
        self.is_async = inspect.iscoroutinefunction(fn)
        self.limit_gate = gate(name, fn, options.limit, options.pass_context)  # fails on a bad by=
        self.rate_gate = gate(name, fn, options.rate, options.pass_context)
        self.signature = call_signature(fn, int(options.pass_context))  # what enqueue checks calls against
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"<rota.Task {self.name}>"

    def options(
        self,
        *,
        delay: timedelta | float | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        key: str | None = None,
        timeout: float | timedelta | None = None,
        retries: int | None = None,
        backoff: Backoff | float | None = None,
        connection: object = None,
        unique_for: timedelta | float | None = None,
        after: Iterable[RunHandle | str | int] | RunHandle | str | int | None = None,
    ) -> TaskCall[P, R]:
        """Per-enqueue options: when (delay or run_at), priority, queue, dedup key, limits,
        `connection`: enqueue inside that connection's open transaction (`rota.txn`),
        `unique_for`: with `key`, return the key's run created within that window (not
        cancelled) instead of a new one; `after`: run once these runs all succeeded."""
        from .flow import check_unique_for, parent_ids

        opts = self.opts.merged(priority=priority, queue=queue, timeout=timeout, retries=retries, backoff=backoff)
        call = TaskCall(self, opts, when=_when(delay, run_at), key=_check_key(key), connection=connection)
        call.unique_for, call.after = check_unique_for(unique_for, call.key), parent_ids(after)
        return call

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> RunHandle:
        return TaskCall(self, self.opts).enqueue(*args, **kwargs)

    def enqueue_many(self, calls: Iterable[Call], *, connection: object = None) -> list[str]:
        return TaskCall(self, self.opts, connection=connection).enqueue_many(calls)

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> RunHandle:
        return await TaskCall(self, self.opts).enqueue_async(*args, **kwargs)

    async def enqueue_many_async(self, calls: Iterable[Call], *, connection: object = None) -> list[str]:
        return await TaskCall(self, self.opts, connection=connection).enqueue_many_async(calls)


class TaskCall(Generic[P, R]):
    """A task with per-enqueue options bound (returned by `Task.options`)."""

    __slots__ = ("after", "connection", "key", "opts", "task", "unique_for", "when")

    def __init__(
        self,
        task: Task[P, R],
        opts: TaskOptions,
        when: datetime | float | None = None,
        key: str | None = None,
        connection: object = None,
    ) -> None:
        self.task = task
        self.opts = opts
        self.when = when
        self.key = key
        self.connection = connection
        self.unique_for: float | None = None
        self.after: tuple[int, ...] = ()

    def _new_run(self, args: Sequence[Any], kwargs: Mapping[str, Any], where: str = "") -> NewRun:
        task = self.task
        check_call(where + task.name, task.signature, args, kwargs)
        a, k = encode_arguments(task.name, args, kwargs, task.fn, int(task.opts.pass_context))
        run = NewRun(
            task=self.task.name,
            args=a,
            kwargs=k,
            queue=self.opts.queue,
            priority=self.opts.priority,
            scheduled_for=self.when if isinstance(self.when, datetime) else None,
            delay=self.when if isinstance(self.when, float) else 0.0,
            key=self.key,
            max_attempts=self.opts.max_attempts,
            timeout=self.opts.timeout,
            backoff=_backoff_json(self.opts, self.task.opts),
            unique_for=self.unique_for,
            after=self.after,
            traceparent=None if tracing.API is None else tracing.current_traceparent(),
        )
        stamp(run, task, args, kwargs)  # its limit and rate keys (rota.flow)
        return run

    def _new_runs(self, calls: Iterable[Call]) -> list[NewRun]:
        runs = []
        for i, call in enumerate(calls):
            if not (isinstance(call, (tuple, list)) and len(call) == 2):
                raise ConfigurationError(
                    f"enqueue_many item {i} is {call!r:.60}; each item must be an (args, kwargs) pair, e.g. ((1, 2), {{}})"
                )
            args, kwargs = call
            runs.append(self._new_run(tuple(args), dict(kwargs), f"enqueue_many item {i}: "))
        if self.key is not None and len(runs) > 1:
            raise ConfigurationError("a dedup key applies to one run; enqueue keyed runs one at a time")
        return runs

    def _insert(self, runs: Sequence[NewRun], connection: object) -> list[tuple[int, bool]]:
        if connection is None:
            return self.task.app.store.insert_runs(runs)
        from .txn import insert_in

        return insert_in(self.task.app, connection, runs)

    async def _insert_async(self, runs: Sequence[NewRun], connection: object) -> list[tuple[int, bool]]:
        if connection is None:
            return await asyncio.to_thread(self._insert, runs, None)
        from .txn import insert_in_async

        return await insert_in_async(self.task.app, connection, runs)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> RunHandle:
        ((run_id, created),) = self._insert([self._new_run(args, kwargs)], self.connection)
        return RunHandle(self.task.app, str(run_id), created)

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> RunHandle:
        """`enqueue` without blocking the event loop (see `rota.aio`)."""
        ((run_id, created),) = await self._insert_async([self._new_run(args, kwargs)], self.connection)
        return RunHandle(self.task.app, str(run_id), created)

    def enqueue_many(self, calls: Iterable[Call], *, connection: object = None) -> list[str]:
        """Enqueue many calls of this task in a few statements; ids in input order."""
        runs, conn = self._new_runs(calls), connection if connection is not None else self.connection
        ids: list[str] = []
        for start in range(0, len(runs), _BATCH):
            ids.extend(str(run_id) for run_id, _ in self._insert(runs[start : start + _BATCH], conn))
        return ids

    async def enqueue_many_async(self, calls: Iterable[Call], *, connection: object = None) -> list[str]:
        runs, conn = self._new_runs(calls), connection if connection is not None else self.connection
        ids: list[str] = []
        for start in range(0, len(runs), _BATCH):
            ids.extend(str(run_id) for run_id, _ in await self._insert_async(runs[start : start + _BATCH], conn))
        return ids


_BATCH = 5000


def _backoff_json(opts: TaskOptions, task_opts: TaskOptions) -> str | None:
    if opts.backoff == task_opts.backoff:
        return None
    import json

    return json.dumps(opts.backoff.to_json())


def _when(delay: timedelta | float | None, run_at: datetime | None) -> datetime | float | None:
    """run_at as UTC, or the delay in seconds (added to the database's clock at insert)."""
    if delay is not None and run_at is not None:
        raise ConfigurationError("give either delay or run_at, not both")
    if delay is not None:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
        if (
            not isinstance(seconds, (int, float))
            or isinstance(seconds, bool)
            or not math.isfinite(seconds)
            or seconds < 0
        ):
            raise ConfigurationError(f"delay must be a non-negative number of seconds or a timedelta, got {delay!r}")
        _check_latest("delay", delay, seconds)
        return float(seconds)
    if run_at is not None:
        if not isinstance(run_at, datetime):
            raise ConfigurationError(f"run_at must be a datetime, got {run_at!r}")
        if run_at.tzinfo is None:
            raise ConfigurationError(
                f"run_at {run_at.isoformat()} has no time zone; pass an aware datetime, e.g. datetime(..., tzinfo=ZoneInfo('Europe/Berlin'))"
            )
        try:
            when = run_at.astimezone(UTC)
        except OverflowError:
            raise ConfigurationError(f"run_at {run_at.isoformat()} is out of range") from None
        if when >= LATEST:
            raise ConfigurationError(
                f"run_at {run_at.isoformat()} is too far ahead: runs must be due before {_LATEST_TEXT}"
            )
        if when < EARLIEST:
            raise ConfigurationError(
                f"run_at {run_at.isoformat()} is too far in the past: runs must be due from "
                f"{_iso_z(EARLIEST)} on (a time in the past is due at once; for now, leave run_at out)"
            )
        return when
    return None


def _iso_z(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


_LATEST_TEXT = _iso_z(LATEST)


def _check_latest(what: str, shown: object, seconds: float) -> None:
    """Refuse a delay that puts the run past LATEST (judged on this host's clock)."""
    if seconds >= (LATEST - datetime.now(UTC)).total_seconds():
        raise ConfigurationError(
            f"{what} {shown!r} is too far ahead: runs must be due before {_LATEST_TEXT} "
            f"(at most about {(LATEST - datetime.now(UTC)).total_seconds():.3g} seconds from now)"
        )


def _check_key(key: object) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not key or len(key) > 500:
        raise ConfigurationError(f"key must be a non-empty string of at most 500 characters, got {key!r:.80}")
    return check_text("key", key)


def check_schedule_call(
    schedule: str, task: Task[..., Any] | None, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> None:
    """A schedule's arguments, checked when it is declared or stored against its task if
    this process declares it: they bind to the handler, and its limit's and rate's `by=`
    can key them (a `by=` that fails on them would fail every tick)."""
    if task is None:
        return
    check_call(f"schedule {schedule!r}: {task.name}", task.signature, args, kwargs)
    stamp(SimpleNamespace(), task, args, kwargs)
