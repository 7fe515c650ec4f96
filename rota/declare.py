"""Declaring tasks and schedules in code: `@app.task`, `@app.schedule`, and the checks that
turn their options into a ScheduleSpec (mixed into App by rota.app)."""

from __future__ import annotations

import hashlib
import inspect
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar, cast, overload

from . import timing
from .errors import (
    ConfigurationError,
    TaskNotFound,
    did_you_mean,
    shown,
)
from .events import Events, check_notify_on
from .limits import Limit, Rate, declared
from .runs import RunContext
from .serialization import check_name as check_name
from .serialization import check_text, encode_arguments
from .stores.base import ScheduleDef
from .tasks import Backoff, Task, TaskOptions, check_schedule_call
from .timing.stored import MAX_EVERY, MAX_GRACE
from .transactional import check_handler

if TYPE_CHECKING:
    from .app import App

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class ScheduleSpec:
    """A validated schedule definition (from `@app.schedule` or `add_schedule`)."""

    name: str
    task: str
    trigger: timing.Trigger
    cron: str | None
    every: timedelta | None
    tz: str
    overlap: str
    misfire: str
    misfire_grace: timedelta
    run_immediately: bool
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    options: TaskOptions
    jitter: timedelta | None = None

    def to_def(self, *, source: str, app: str | None) -> ScheduleDef:
        args, kwargs = encode_arguments(self.task, self.args, self.kwargs)
        backoff = json.dumps(self.options.backoff.to_json())
        fields = {
            "task": self.task,
            "cron": self.cron,
            "every": self.every.total_seconds() if self.every is not None else None,
            "tz": self.tz,
            "args": args,
            "kwargs": kwargs,
            "overlap": self.overlap,
            "misfire": self.misfire,
            "misfire_grace": self.misfire_grace.total_seconds(),
            "run_immediately": self.run_immediately,
            "queue": self.options.queue,
            "priority": self.options.priority,
            "max_attempts": self.options.max_attempts,
            "timeout": self.options.timeout,
            "backoff": backoff,
        }
        jitter = self.jitter.total_seconds() if self.jitter is not None else None
        hashed = fields if jitter is None else {**fields, "jitter": jitter}  # no jitter: the hash of before
        definition = hashlib.sha256(json.dumps(hashed, sort_keys=True).encode()).hexdigest()
        return ScheduleDef(name=self.name, source=source, app=app, definition=definition, jitter=jitter, **fields)  # type: ignore[arg-type]


def build_schedule(
    name: str,
    task: str,
    *,
    cron: str | None,
    every: timedelta | float | None,
    tz: str | None,
    overlap: str,
    misfire: str,
    misfire_grace: timedelta | float,
    run_immediately: bool,
    args: Sequence[Any] | None,
    kwargs: Mapping[str, Any] | None,
    options: TaskOptions,
    jitter: timedelta | float | None = None,
) -> ScheduleSpec:
    """Validate a schedule's parts (clear errors naming the bad value) and assemble it."""
    check_name("schedule", name)
    trigger = timing.make_trigger(cron=cron, every=every, tz=tz)
    _check_every(trigger)
    grace = _check_grace(misfire_grace)
    if not isinstance(run_immediately, bool):
        raise ConfigurationError(f"run_immediately must be True or False, got {run_immediately!r}")
    if args is not None and (isinstance(args, (str, bytes)) or not isinstance(args, Sequence)):
        raise ConfigurationError(f"args must be a list or tuple, got {args!r}")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise ConfigurationError(f"kwargs must be a dict, got {kwargs!r}")
    spec = ScheduleSpec(
        name=name,
        task=task,
        trigger=trigger,
        cron=cron,
        every=getattr(trigger, "every", None),
        tz=trigger.tz,
        overlap=timing.check_overlap(overlap),
        misfire=timing.check_misfire(misfire),
        misfire_grace=grace,
        run_immediately=run_immediately,
        args=tuple(args or ()),
        kwargs=dict(kwargs or {}),
        options=options,
        jitter=timing.check_jitter(jitter, trigger),
    )
    spec.to_def(source="api", app=None)  # JSON check of args/kwargs, naming the bad one
    return spec


# Characters a name may not hold: C0 and C1 controls (newline, tab, escape...), DEL and the
# Unicode line and paragraph separators. A name is shown on one line in logs, tables, mail
# subjects; a newline in one would forge log lines.
def _filter(what: str, value: str | None) -> str | None:
    """A name used to look something up: a NUL or lone surrogate cannot match anything stored."""
    return check_text(what, value) if isinstance(value, str) else value


# The shortest and longest `every=` of a schedule. Each tick is a row and a transaction on
# every poll that finds it due: below a second, a loop inside one long-running task is the
# right tool. Past ten years, use cron (and the grid would leave the range of dates).
MIN_EVERY = timedelta(seconds=1)


def _check_every(trigger: timing.Trigger) -> None:
    every = getattr(trigger, "every", None)
    if every is not None and not MIN_EVERY <= every <= MAX_EVERY:
        raise ConfigurationError(
            f"every={every.total_seconds():g} seconds is out of range: a schedule fires at most once a "
            f"second and at least every {MAX_EVERY.days} days (every= from {MIN_EVERY.total_seconds():g} "
            f"to {MAX_EVERY.total_seconds():.0f} seconds); for sub-second work loop inside one task"
        )


def _check_grace(misfire_grace: timedelta | float) -> timedelta:
    grace = misfire_grace if isinstance(misfire_grace, timedelta) else _seconds("misfire_grace", misfire_grace)
    if grace < timedelta(0):
        raise ConfigurationError(f"misfire_grace must be >= 0, got {shown(misfire_grace)}")
    if grace > MAX_GRACE:
        raise ConfigurationError(
            f"misfire_grace={shown(misfire_grace)} is out of range: from 0 to {MAX_GRACE.total_seconds():.0f} "
            f"seconds ({MAX_GRACE.days} days); to run every missed tick however late, use misfire='all'"
        )
    return grace


def _seconds(what: str, value: object) -> timedelta:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise ConfigurationError(f"{what} must be a number of seconds or a timedelta, got {value!r}")
    try:
        return timedelta(seconds=value)
    except OverflowError:
        return timedelta.max  # refused by the caller's range check, which names the value


def _task_options(options: Mapping[str, Any], base: TaskOptions | None = None) -> TaskOptions:
    allowed = {
        "queue",
        "priority",
        "retries",
        "backoff",
        "timeout",
        "retry_on",
        "pass_context",
        "isolation",
        "transactional",
        "limit",
        "rate",
    }
    unknown = sorted(set(options) - allowed - {"name"})
    if unknown:
        hint = did_you_mean(unknown[0], allowed)
        raise ConfigurationError(
            f"unknown task option {unknown[0]!r}{hint}; valid options: {', '.join(sorted(allowed))}"
        )
    options = {k: v for k, v in options.items() if k != "name"}
    return (base or TaskOptions()).merged(**options)


def _check_context(name: str, fn: Callable[..., Any], opts: TaskOptions) -> None:
    """A handler whose first parameter is annotated RunContext, declared without
    pass_context=True, would get the run's first argument there: refused at registration."""
    if opts.pass_context or opts.transactional:
        return
    try:
        first = next(iter(inspect.signature(fn).parameters.values()), None)
    except (TypeError, ValueError):
        return
    if first is None:
        return
    hint = first.annotation
    if hint is RunContext or (isinstance(hint, str) and hint.rsplit(".", 1)[-1] == "RunContext"):
        raise ConfigurationError(
            f"task {name!r}: its first parameter {first.name!r} is annotated RunContext, but the task is declared "
            "without pass_context=True, so it would get the run's first argument: declare "
            "@app.task(pass_context=True, ...)"
        )


def _stored_backoff(text: str | None) -> Backoff:
    return Backoff.from_json(json.loads(text)) if text else Backoff()


class Declarations:
    """The registry of tasks and code schedules (App's `task`, `schedule`, `get_task`)."""

    tasks: dict[str, Task[Any, Any]]
    schedules: dict[str, ScheduleSpec]
    events: Events

    # -- declaring tasks and schedules ---------------------------------------------------
    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        *,
        name: str | None = None,
        queue: str = "default",
        priority: int = 0,
        retries: int = 0,
        backoff: Backoff | float | timedelta | None = None,
        timeout: float | timedelta | None = None,
        retry_on: type[BaseException] | Sequence[type[BaseException]] | None = None,
        pass_context: Literal[False] = False,
        isolation: str = "none",
        limit: int | Limit | None = None,
        rate: Rate | None = None,
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    @overload
    def task(
        self,
        *,
        name: str | None = None,
        queue: str = "default",
        priority: int = 0,
        retries: int = 0,
        backoff: Backoff | float | timedelta | None = None,
        timeout: float | timedelta | None = None,
        retry_on: type[BaseException] | Sequence[type[BaseException]] | None = None,
        pass_context: Literal[True],
        isolation: str = "none",
        transactional: bool = False,
        limit: int | Limit | None = None,
        rate: Rate | None = None,
    ) -> Callable[[Callable[..., R]], Task[..., R]]: ...

    @overload
    def task(
        self,
        *,
        name: str | None = None,
        queue: str = "default",
        priority: int = 0,
        retries: int = 0,
        backoff: Backoff | float | timedelta | None = None,
        timeout: float | timedelta | None = None,
        retry_on: type[BaseException] | Sequence[type[BaseException]] | None = None,
        pass_context: bool = True,
        transactional: Literal[True],
        limit: int | Limit | None = None,
        rate: Rate | None = None,
    ) -> Callable[[Callable[..., R]], Task[..., R]]: ...

    def task(self, fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:  # type: ignore[misc]
        """Register a task type: `@app.task` or `@app.task(retries=3, timeout=60, ...)`."""
        if fn is not None:
            return self._register(fn, options)
        _task_options(options)  # fail at the decorator line, before the function is seen
        return lambda f: self._register(f, options)

    def _register(self, fn: Callable[..., Any], options: dict[str, Any]) -> Task[Any, Any]:
        if isinstance(fn, Task):
            raise ConfigurationError(f"{fn.name} is already a rota task; decorate the plain function once")
        if not callable(fn):
            raise ConfigurationError(f"@app.task needs a function, got {fn!r}")
        options = dict(options)
        name = options.pop("name", None) or f"{fn.__module__}.{fn.__qualname__}"
        check_name("task", name)
        if name in self.tasks:
            raise ConfigurationError(
                f"duplicate task name {name!r}: already registered by {self.tasks[name].fn!r}; pass name=... to one of them"
            )
        opts = _task_options(options)
        check_handler(name, fn, opts)  # rota.transactional: no async def, no process isolation
        _check_context(name, fn, opts)
        if opts.isolation == "process":
            from .executor import handler_path

            try:
                handler_path(fn)
            except ValueError as exc:
                raise ConfigurationError(str(exc)) from None
        task: Task[Any, Any] = Task(cast("App", self), fn, name, opts)
        declared({**self.tasks, name: task})  # a shared limit or rate declared twice differently
        self.tasks[name] = task
        return task

    def schedule(
        self,
        *,
        cron: str | None = None,
        every: timedelta | float | None = None,
        tz: str | None = None,
        name: str | None = None,
        overlap: str = "skip",
        misfire: str = "coalesce",
        misfire_grace: timedelta | float = timedelta(seconds=60),
        run_immediately: bool = False,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        jitter: timedelta | float | None = None,
        **task_options: Any,
    ) -> Callable[[Callable[..., Any]], Task[..., Any]]:
        """Declare a recurring job in code (upserted at worker start): `cron=` or `every=`."""
        notify_on = check_notify_on(task_options.pop("notify_on", None))  # fails here, at the decorator
        when: dict[str, Any] = {"cron": cron, "every": every, "tz": tz, "overlap": overlap, "misfire": misfire,
                                "misfire_grace": misfire_grace, "run_immediately": run_immediately,
                                "args": args, "kwargs": kwargs, "jitter": jitter}  # fmt: skip

        def decorate(fn: Callable[..., Any]) -> Task[..., Any]:
            task, registered = self._schedule_task(fn, name, task_options)
            try:
                spec = build_schedule(name or task.name, task.name, options=task.opts, **when)
                check_schedule_call(spec.name, task, spec.args, spec.kwargs)
                if spec.name in self.schedules:
                    raise ConfigurationError(f"duplicate schedule name {spec.name!r}; pass name=... to tell them apart")
            except BaseException:
                if registered:  # a bad schedule leaves no half-registered task behind
                    del self.tasks[task.name]
                raise
            self.schedules[spec.name] = spec
            self.events.set_notify_on(spec.name, notify_on)
            return task

        return decorate

    def _schedule_task(
        self, fn: Callable[..., Any], name: str | None, task_options: dict[str, Any]
    ) -> tuple[Task[..., Any], bool]:
        """The task a schedule runs, and whether this decorator registered it."""
        if not isinstance(fn, Task):
            return self._register(fn, {"name": name, **task_options}), True
        if task_options:
            raise ConfigurationError(f"{fn.name} is already a task; give task options on @app.task")
        return fn, False

    def get_task(self, name: str) -> Task[Any, Any]:
        try:
            return self.tasks[name]
        except KeyError:
            names = sorted(self.tasks)
            known = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
            raise TaskNotFound(
                f"no task named {name!r}{did_you_mean(name, self.tasks)}; this app registers: {known or '(none)'}"
            ) from None

    def _task_ref(self, task: Task[..., Any] | str) -> tuple[str, TaskOptions]:
        if isinstance(task, Task):
            return task.name, task.opts
        if isinstance(task, str):
            check_name("task", task)
            known = self.tasks.get(task)
            return task, known.opts if known is not None else TaskOptions()
        raise ConfigurationError(f"task must be a rota task or a task name, got {task!r}")
