"""App: the registry of tasks and schedules, and every client operation."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar, overload

from . import config, timing
from .aio import AsyncClient
from .clock import Clock
from .errors import (
    ConfigurationError,
    RunNotFound,
    ScheduleNotFound,
    SchemaVersionError,
    TaskNotFound,
    did_you_mean,
)
from .events import Event, Events, Notifier, check_notify_on
from .models import FINAL_STATUSES, STATUSES, LockInfo, Run, ScheduleInfo, WorkerInfo
from .serialization import check_text, encode_arguments
from .stores import open_store
from .stores.base import DueSchedule, NewRun, RunFilter, ScheduleDef, Store, run_stats
from .tasks import Backoff, RunContext, RunHandle, Task, TaskOptions, check_int, check_queue

if TYPE_CHECKING:
    from .locks import AsyncLockContext, Lease, LockContext
    from .worker import Worker

P = ParamSpec("P")
R = TypeVar("R")
log = logging.getLogger("rota")

DEFAULT_DATABASE_URL = "sqlite:///rota.db"
DEFAULT_RETENTION: dict[str, timedelta] = dict(config.DEFAULT_RETENTION)  # a sentinel too: "not given"


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
        definition = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
        return ScheduleDef(name=self.name, source=source, app=app, definition=definition, **fields)  # type: ignore[arg-type]


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
) -> ScheduleSpec:
    """Validate a schedule's parts (clear errors naming the bad value) and assemble it."""
    check_name("schedule", name)
    trigger = timing.make_trigger(cron=cron, every=every, tz=tz)
    _check_every(trigger)
    grace = misfire_grace if isinstance(misfire_grace, timedelta) else _seconds("misfire_grace", misfire_grace)
    if grace < timedelta(0):
        raise ConfigurationError(f"misfire_grace must be >= 0, got {misfire_grace!r}")
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
    )
    spec.to_def(source="api", app=None)  # JSON check of args/kwargs, naming the bad one
    return spec


def check_name(what: str, name: object) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise ConfigurationError(f"{what} name must be a non-empty string of at most 200 characters, got {name!r}")
    return check_text(f"{what} name", name)


def _filter(what: str, value: str | None) -> str | None:
    """A name used to look something up: a NUL or lone surrogate cannot match anything stored."""
    return check_text(what, value) if isinstance(value, str) else value


# The shortest and longest `every=` of a schedule. Each tick is a row and a transaction on
# every poll that finds it due: below a second, a loop inside one long-running task is the
# right tool. Past ten years, use cron (and the grid would leave the range of dates).
MIN_EVERY = timedelta(seconds=1)
MAX_EVERY = timedelta(days=3650)


def _check_every(trigger: timing.Trigger) -> None:
    every = getattr(trigger, "every", None)
    if every is not None and not MIN_EVERY <= every <= MAX_EVERY:
        raise ConfigurationError(
            f"every={every.total_seconds():g} seconds is out of range: a schedule fires at most once a "
            f"second and at least every {MAX_EVERY.days} days (every= from {MIN_EVERY.total_seconds():g} "
            f"to {MAX_EVERY.total_seconds():.0f} seconds); for sub-second work loop inside one task"
        )


def _seconds(what: str, value: object) -> timedelta:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise ConfigurationError(f"{what} must be a number of seconds or a timedelta, got {value!r}")
    return timedelta(seconds=value)


class App(AsyncClient):
    """A rota application: tasks, schedules, and the database they live in.

    >>> app = rota.App()                         # ROTA_DATABASE_URL, else sqlite:///rota.db
    >>> app = rota.App("postgresql://postgres@127.0.0.1:5432/test", concurrency=8)
    """

    def __init__(
        self,
        database_url: str | None = None,
        *,
        name: str = "default",
        concurrency: int | None = None,
        lease: float | None = None,
        poll_interval: float | None = None,
        shutdown_timeout: float | None = None,
        clock: Clock | None = None,
        locks_url: str | None = None,
        retention: Mapping[str, timedelta] | None = DEFAULT_RETENTION,
        prune_interval: float | None = None,
        pool_size: int | None = None,
        store_options: Mapping[str, Any] | None = None,
        notifiers: Sequence[Notifier] | None = None,
    ) -> None:
        # Arguments left None (retention: left at its default) come from ROTA_* variables, else
        # defaults: rota.config holds the table; setting_sources says where each came from.
        cfg, self.setting_sources = config.resolve(
            database_url=database_url or None,
            concurrency=concurrency,
            lease=lease,
            poll_interval=poll_interval,
            shutdown_timeout=shutdown_timeout,
            locks_url=locks_url,
            prune_interval=prune_interval,
            pool_size=pool_size,
            retention=None if retention is DEFAULT_RETENTION else (retention or {}),
        )
        self.database_url: str = cfg["database_url"]
        self.name = check_name("app", name)
        self.concurrency: int = cfg["concurrency"]
        self.lease: float = cfg["lease"]
        self.poll_interval: float = cfg["poll_interval"]
        self.shutdown_timeout: float = cfg["shutdown_timeout"]
        self.clock = clock
        self.locks_url: str | None = cfg["locks_url"]
        config.remember_secrets(self.database_url, self.locks_url)  # log lines and errors redact them
        if self.locks_url is not None:
            from .lock_backend import parse_locks_url

            parse_locks_url(self.locks_url)  # a bad URL fails here, not at the first lock
        self.retention = _check_retention(cfg["retention"])
        self.prune_interval: float = cfg["prune_interval"]
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.schedules: dict[str, ScheduleSpec] = {}
        pool = cfg["pool_size"] if pool_size is not None or not self.database_url.startswith("sqlite") else None
        self._store_options: dict[str, Any] = {"pool_size": pool} if pool is not None else {}
        self._store_options.update(store_options or {})  # e.g. PostgreSQL lock_timeout=...
        # Construct now so that a bad URL fails here, naming itself; connect on first use.
        self._store: Store = open_store(self.database_url, clock, **self._store_options)
        self._ready = False
        self._lock = threading.Lock()
        self._workers: list[Worker] = []
        self._locks: Any = None
        self.events = Events(self)  # hooks and notifiers (rota.events)
        for notifier in notifiers or ():
            self.add_notifier(notifier)

    def __repr__(self) -> str:
        return f"<rota.App {self.name} {self.database_label}>"

    @property
    def database_label(self) -> str:
        return config.redact_url(self.database_url)

    # -- the store -----------------------------------------------------------------------
    @property
    def store(self) -> Store:
        """The store, connected and with its schema up to date (migrated on first use)."""
        if not self._ready:
            with self._lock:
                if not self._ready:
                    self._ensure_schema()
                    self._ready = True
        return self._store

    def _ensure_schema(self) -> None:
        current, latest = self._store.schema_version()
        if current > latest:
            raise SchemaVersionError(
                f"the database {self.database_label} has rota schema version {current}, newer than "
                f"the {latest} this version of rota knows: upgrade rota here"
            )
        if current < latest:
            applied = self._store.migrate()
            if applied:
                log.info("migrated %s: %s", self.database_label, ", ".join(applied))

    def migrate(self, *, dry_run: bool = False) -> list[str]:
        """Apply pending migrations; return their names (dry_run: only list them)."""
        applied = self._store.migrate(dry_run=dry_run)
        if not dry_run:
            self._store.check_writable()  # the workers' writes, as this user
            self._ready = True
        return applied

    def prepare(self) -> None:
        """What a worker does at start: connect, migrate, check it may write (PermissionDenied
        naming the privilege and table if not), upsert code schedules."""
        store = self.store
        store.check_writable()
        now = store.now()
        defs = [spec.to_def(source="code", app=self.name) for spec in self.schedules.values()]
        first = {spec.name: spec.trigger.next_after(now) for spec in self.schedules.values()}
        store.sync_schedules(self.name, defs, first)

    def close(self) -> None:
        """Deliver queued hook events (briefly), release held locks, close every connection."""
        self.events.close()
        if self._locks is not None:
            self._locks.close()  # releases this process's locks, stops the renewer thread
        self._store.close()
        self._ready = False

    def _adopt_worker(self, worker: Worker) -> None:
        """Remember a worker of this process (stats() reports it)."""
        if worker not in self._workers:
            self._workers.append(worker)

    # -- event hooks and notifiers ---------------------------------------------------------
    def on(self, *events: str, timeout: float | None = 10.0) -> Callable[[Callable[[Event], R]], Callable[[Event], R]]:
        """`@app.on("run_failed", ...)`: call a sync or async function with each such Event."""
        return self.events.on(*events, timeout=timeout)

    def add_notifier(self, notifier: Notifier) -> None:
        """Send events to a notifier (rota.notify.Webhook, rota.notify.Email)."""
        self.events.add_notifier(notifier)

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
        retry_on: Sequence[type[BaseException]] | None = None,
        pass_context: Literal[False] = False,
        isolation: str = "none",
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
        retry_on: Sequence[type[BaseException]] | None = None,
        pass_context: Literal[True],
        isolation: str = "none",
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
        if opts.isolation == "process":
            from .executor import handler_path

            try:
                handler_path(fn)
            except ValueError as exc:
                raise ConfigurationError(str(exc)) from None
        task: Task[Any, Any] = Task(self, fn, name, opts)
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
        **task_options: Any,
    ) -> Callable[[Callable[..., Any]], Task[..., Any]]:
        """Declare a recurring job in code (upserted at worker start): `cron=` or `every=`."""
        notify_on = check_notify_on(task_options.pop("notify_on", None))  # fails here, at the decorator

        def decorate(fn: Callable[..., Any]) -> Task[..., Any]:
            registered = False
            if isinstance(fn, Task):
                task = fn
                if task_options:
                    raise ConfigurationError(f"{task.name} is already a task; give task options on @app.task")
            else:
                task = self._register(fn, {"name": name, **task_options})
                registered = True
            try:
                spec = build_schedule(
                    name or task.name,
                    task.name,
                    cron=cron,
                    every=every,
                    tz=tz,
                    overlap=overlap,
                    misfire=misfire,
                    misfire_grace=misfire_grace,
                    run_immediately=run_immediately,
                    args=args,
                    kwargs=kwargs,
                    options=task.opts,
                )
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

    def get_task(self, name: str) -> Task[Any, Any]:
        try:
            return self.tasks[name]
        except KeyError:
            raise TaskNotFound(f"no task named {name!r}{did_you_mean(name, self.tasks)}") from None

    # -- schedules as data ---------------------------------------------------------------
    def add_schedule(
        self,
        name: str,
        task: Task[..., Any] | str,
        *,
        cron: str | None = None,
        every: timedelta | float | None = None,
        tz: str | None = None,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        overlap: str = "skip",
        misfire: str = "coalesce",
        misfire_grace: timedelta | float = timedelta(seconds=60),
        run_immediately: bool = False,
        **task_options: Any,
    ) -> ScheduleInfo:
        """Create a schedule stored in the database; every running worker picks it up."""
        if "notify_on" in task_options:
            raise ConfigurationError(
                "notify_on is for schedules declared in code (@app.schedule); for a stored schedule, "
                f"give a notifier schedules=[{name!r}] and the events= to send"
            )
        task_name, base = self._task_ref(task)
        spec = build_schedule(
            name,
            task_name,
            cron=cron,
            every=every,
            tz=tz,
            overlap=overlap,
            misfire=misfire,
            misfire_grace=misfire_grace,
            run_immediately=run_immediately,
            args=args,
            kwargs=kwargs,
            options=_task_options(task_options, base),
        )
        store = self.store
        store.add_schedule(spec.to_def(source="api", app=None), spec.trigger.next_after(store.now()))
        return self.get_schedule(name)

    def update_schedule(self, name: str, **changes: Any) -> ScheduleInfo:
        """Change a stored schedule; a new cron/every/tz recomputes its next fire time."""
        _filter("schedule name", name)
        store = self.store
        current = store.get_schedule_def(name)
        if current is None or (info := store.get_schedule(name)) is None or not info.active:
            raise ScheduleNotFound(f"no active schedule named {name!r}")
        if current.source == "code":
            raise ConfigurationError(
                f"schedule {name!r} is declared in code (@app.schedule); change it there, it is re-synced when workers start"
            )
        allowed = {"cron", "every", "tz", "args", "kwargs", "overlap", "misfire", "misfire_grace", "run_immediately", "task",
                   "queue", "priority", "retries", "timeout", "backoff"}  # fmt: skip
        unknown = sorted(set(changes) - allowed)
        if unknown:
            raise ConfigurationError(f"cannot update {unknown} of a schedule; changeable: {', '.join(sorted(allowed))}")
        timing_changed = any(k in changes for k in ("cron", "every", "tz"))
        cron = changes.get("cron", current.cron if "every" not in changes else None)
        every = changes.get("every", current.every if "cron" not in changes else None)
        task_name = self._task_ref(changes["task"])[0] if "task" in changes else current.task
        options = TaskOptions(
            queue=changes.get("queue", current.queue),
            priority=changes.get("priority", current.priority),
            retries=changes.get("retries", current.max_attempts - 1),
            backoff=Backoff.coerce(changes["backoff"]) if "backoff" in changes else _stored_backoff(current.backoff),
            timeout=changes.get("timeout", current.timeout),
        )
        spec = build_schedule(
            name,
            task_name,
            cron=cron,
            every=every,
            tz=changes.get("tz", current.tz),
            overlap=changes.get("overlap", current.overlap),
            misfire=changes.get("misfire", current.misfire),
            misfire_grace=changes.get("misfire_grace", current.misfire_grace),
            run_immediately=changes.get("run_immediately", current.run_immediately),
            args=changes.get("args", json.loads(current.args)),
            kwargs=changes.get("kwargs", json.loads(current.kwargs)),
            options=options,
        )
        replan = timing_changed or info.plan_error is not None  # an error left it without a next time
        next_run_at = spec.trigger.next_after(store.now()) if replan else None
        store.update_schedule(spec.to_def(source="api", app=None), next_run_at)
        return self.get_schedule(name)

    def remove_schedule(self, name: str) -> None:
        _filter("schedule name", name)
        """Deactivate a schedule: it stops firing, its pending runs are cancelled, history stays."""
        self.store.remove_schedule(name)

    def _task_ref(self, task: Task[..., Any] | str) -> tuple[str, TaskOptions]:
        if isinstance(task, Task):
            return task.name, task.opts
        if isinstance(task, str):
            check_name("task", task)
            known = self.tasks.get(task)
            return task, known.opts if known is not None else TaskOptions()
        raise ConfigurationError(f"task must be a rota task or a task name, got {task!r}")

    # -- inspection ----------------------------------------------------------------------
    def get_run(self, run_id: str | int) -> Run:
        run = self.store.get_run(_run_id(run_id))
        if run is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        return run

    def list_runs(
        self,
        status: str | None = None,
        task: str | None = None,
        schedule: str | None = None,
        limit: int = 100,
        *,
        queue: str | None = None,
        before: str | int | None = None,
    ) -> list[Run]:
        """Runs, newest first, filtered by status/task/schedule/queue; `before` pages by id."""
        if status is not None and status not in STATUSES:
            raise ConfigurationError(
                f"unknown status {status!r}{did_you_mean(status, STATUSES)}; valid: {', '.join(STATUSES)}"
            )
        check_int("limit", limit, low=1, high=100_000)
        task, schedule, queue = _filter("task", task), _filter("schedule", schedule), _filter("queue", queue)
        flt = RunFilter(status, task, schedule, queue, limit, _run_id(before) if before is not None else None)
        return self.store.list_runs(flt)

    def list_schedules(self, *, include_inactive: bool = False) -> list[ScheduleInfo]:
        return self.store.list_schedules(include_inactive)

    def get_schedule(self, name: str) -> ScheduleInfo:
        _filter("schedule name", name)
        info = self.store.get_schedule(name)
        if info is None:
            known = [s.name for s in self.store.list_schedules(True)]
            raise ScheduleNotFound(f"no schedule named {name!r}{did_you_mean(name, known)}")
        return info

    def list_workers(self, *, stale_after: float | None = None) -> list[WorkerInfo]:
        return self.store.list_workers(stale_after if stale_after is not None else self.lease * 2)

    def stats(self) -> dict[str, Any]:
        """Counts by status, live workers and their capacity, this process's worker ids."""
        store = self.store
        runs = run_stats(store.run_counts())
        counts = runs["runs"]
        workers = [w for w in self.list_workers() if w.alive]
        local = [w for w in self._workers if w.state in ("running", "draining")]
        return {
            **runs,
            "running": counts["running"],
            "pending": counts["pending"],
            "workers": len(workers),
            "capacity": sum(w.concurrency for w in workers),
            "stuck": sum(w.stuck for w in workers),
            "worker_id": local[0].id if local else None,
            "worker_ids": [w.id for w in local],
            "local_inflight": sum(len(w.inflight) for w in local),
            "database": self.database_label,
        }

    # -- control -------------------------------------------------------------------------
    def pause(self, name: str) -> ScheduleInfo:
        _filter("schedule name", name)
        self.store.set_paused(name, True, None)
        return self.get_schedule(name)

    def resume(self, name: str) -> ScheduleInfo:
        """Resume from now: ticks that fell while paused do not run. A schedule that is not
        paused is left alone (its next fire time, overdue or not, is kept)."""
        info = self.get_schedule(name)
        if not info.paused:
            return info
        trigger = timing.make_trigger(cron=info.cron, every=info.every, tz=info.tz)
        self.store.set_paused(name, False, trigger.next_after(self.store.now()))
        return self.get_schedule(name)

    def trigger(self, name: str) -> RunHandle:
        """Run a schedule now, honouring its overlap policy (TriggerRefused under 'skip'
        while a run is active; queued behind it under 'queue'; replacing it under 'replace')."""
        _filter("schedule name", name)
        store = self.store
        sdef = store.get_schedule_def(name)
        info = store.get_schedule(name)
        if sdef is None or info is None or not info.active:
            raise ScheduleNotFound(f"no active schedule named {name!r}")
        due = DueSchedule(**_due_fields(sdef), next_run_at=info.next_run_at or store.now())
        run_id, outcome = store.trigger(due)
        handle = RunHandle(self, str(run_id))
        handle.created = True
        if outcome != "started":
            log.info("trigger of %r %s behind the active run (overlap=%s)", name, outcome, sdef.overlap)
        return handle

    def cancel(self, run_id: str | int, reason: str = "cancelled on request") -> Run:
        """Pending: cancelled at once. Running: asked to stop (async handlers are cancelled,
        sync ones see ctx.cancelled), then stopped by its timeout. Final: unchanged."""
        status = self.store.cancel(_run_id(run_id), reason)
        if status is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        return self.get_run(run_id)

    def retry(self, run_id: str | int) -> RunHandle:
        """Run a finished run again, as a new run (retry_of points back; history stays). It
        keeps the run's key and backoff, and a run of an exclusive schedule keeps the
        schedule's overlap policy (TriggerRefused under 'skip' while another run is active)."""
        run = self.get_run(run_id)
        if run.status not in FINAL_STATUSES:
            raise ConfigurationError(f"run {run.id} is still {run.status}; wait for it or cancel it before retrying")
        if {"args", "kwargs"} & set(run.corrupt):
            raise ConfigurationError(
                f"run {run.id} cannot be retried: its stored arguments are not valid JSON; enqueue a new run instead"
            )
        args, kwargs = encode_arguments(run.task, run.args, run.kwargs)
        key, backoff = self.store.retry_source(int(run.id)) or (run.key, None)
        sdef = self.store.get_schedule_def(run.schedule) if run.schedule is not None else None
        if sdef is not None and sdef.overlap != "concurrent":
            due = DueSchedule(**{**_due_fields(sdef), "task": run.task, "args": args, "kwargs": kwargs,
                                 "queue": run.queue, "priority": run.priority, "max_attempts": run.max_attempts,
                                 "timeout": run.timeout, "backoff": backoff, "next_run_at": self.store.now()})  # fmt: skip
            new_id, _ = self.store.trigger(due, key=key, retry_of=int(run.id))
            return RunHandle(self, str(new_id))
        new = NewRun(
            task=run.task,
            args=args,
            kwargs=kwargs,
            queue=run.queue,
            priority=run.priority,
            max_attempts=run.max_attempts,
            timeout=run.timeout,
            backoff=backoff,
            key=key,
            schedule=run.schedule,
            retry_of=int(run.id),
        )
        ((new_id, _),) = self.store.insert_runs([new])
        return RunHandle(self, str(new_id))

    # -- workers -------------------------------------------------------------------------
    def worker(self, **options: Any) -> Worker:
        """A Worker for this app (see Worker for options); run it with `await w.run()`."""
        from .worker import Worker

        for queue in options.get("queues") or ():
            check_queue(queue)
        return Worker(self, **options)

    def run_worker(
        self,
        concurrency: int | None = None,
        queues: Sequence[str] | None = None,
        shutdown_timeout: float | None = None,
        **options: Any,
    ) -> None:
        """Run a worker in this thread until SIGTERM/SIGINT (drains, then returns)."""
        asyncio.run(
            self.run_worker_async(concurrency=concurrency, queues=queues, shutdown_timeout=shutdown_timeout, **options)
        )

    async def run_worker_async(
        self,
        concurrency: int | None = None,
        queues: Sequence[str] | None = None,
        shutdown_timeout: float | None = None,
        **options: Any,
    ) -> None:
        """Run a worker on the running event loop until stopped."""
        options.setdefault("metrics_port", config.value("metrics_port"))  # ROTA_METRICS_PORT
        worker = self.worker(
            concurrency=concurrency,
            queues=list(queues) if queues else config.value("queues"),  # else ROTA_QUEUES
            shutdown_timeout=shutdown_timeout,
            **options,
        )
        await worker.run()

    # -- named locks ---------------------------------------------------------------------
    @property
    def locks(self) -> Any:
        if self._locks is None:
            from .lock_factory import make_lock_backend
            from .locks import LockManager

            with self._lock:
                if self._locks is None:
                    self._locks = LockManager(make_lock_backend(self))
        return self._locks

    def lock(self, name: str, ttl: float = 60.0, wait: float = 0.0) -> LockContext:
        """`with app.lock(name, ttl=60, wait=0) as lease:` — see rota.locks."""
        return self.locks.lock(name, ttl, wait)  # type: ignore[no-any-return]

    def lock_async(self, name: str, ttl: float = 60.0, wait: float = 0.0) -> AsyncLockContext:
        return self.locks.lock_async(name, ttl, wait)  # type: ignore[no-any-return]

    def try_lock(self, name: str, ttl: float = 60.0) -> Lease | None:
        return self.locks.try_lock(name, ttl)  # type: ignore[no-any-return]

    def list_locks(self) -> list[LockInfo]:
        return self.locks.list_locks()  # type: ignore[no-any-return]

    def release_process_locks(self) -> None:
        if self._locks is not None:
            self._locks.release_all()


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
    }
    unknown = sorted(set(options) - allowed - {"name"})
    if unknown:
        hint = did_you_mean(unknown[0], allowed)
        raise ConfigurationError(
            f"unknown task option {unknown[0]!r}{hint}; valid options: {', '.join(sorted(allowed))}"
        )
    options = {k: v for k, v in options.items() if k != "name"}
    return (base or TaskOptions()).merged(**options)


def _stored_backoff(text: str | None) -> Backoff:
    return Backoff.from_json(json.loads(text)) if text else Backoff()


def _check_retention(retention: Mapping[str, timedelta] | None) -> dict[str, timedelta]:
    if not retention:
        return {}
    result = {}
    for status, keep in retention.items():
        if status not in FINAL_STATUSES:
            raise ConfigurationError(
                f"retention applies to final statuses ({', '.join(sorted(FINAL_STATUSES))}), got {status!r}"
            )
        if not isinstance(keep, timedelta) or keep <= timedelta(0):
            raise ConfigurationError(f"retention for {status!r} must be a positive timedelta, got {keep!r}")
        result[status] = keep
    return result


def _run_id(run_id: object) -> int:
    try:
        value = int(str(run_id))
    except ValueError:
        raise RunNotFound(f"no run with id {run_id!r}: run ids are integers") from None
    if not 1 <= value <= 2**63 - 1:
        raise RunNotFound(f"no run with id {run_id!r}: run ids are integers from 1 to {2**63 - 1}")
    return value


__all__ = ["App", "RunContext", "ScheduleSpec"]


def _due_fields(sdef: ScheduleDef) -> dict[str, Any]:
    """A schedule definition's fields that a DueSchedule shares (all but next_run_at)."""
    names = ("name", "task", "cron", "every", "tz", "args", "kwargs", "overlap", "misfire", "misfire_grace",
             "queue", "priority", "max_attempts", "timeout", "backoff")  # fmt: skip
    return {n: getattr(sdef, n) for n in names}
