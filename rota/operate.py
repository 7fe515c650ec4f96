"""What an operator does without the App's code (issue 44): queues paused fleet-wide, and the
check that a task named by a process that does not declare it (`rota schedules add`,
`rota enqueue` without APP, the dashboard's API) is one some worker declares (mixed into App).

A paused queue is a row of `rota_queue_pauses` (schema 21): every worker's next claim skips
its runs (the claim's own statement reads the table: no broadcast, no extra round trip).
Runs already running finish; runs a worker claimed ahead of their time (held) start at it.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import logging
import os
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import quarantine
from .errors import ConfigurationError, DatabaseError, did_you_mean
from .events import check_notify_on
from .logs import log_event
from .models import QueueInfo, ScheduleInfo
from .serialization import encode_arguments
from .stores.records import NewRun
from .tasks import Task, TaskOptions, check_int, check_queue

if TYPE_CHECKING:
    from .app import App
    from .stores.base import Store

log = logging.getLogger("rota")


class OperatorClient:
    """Queue pause and resume, and the declared tasks (mixed into App)."""

    tasks: Mapping[str, object]

    @property
    def store(self) -> Store:
        raise NotImplementedError  # App.store

    def pause_queue(self, queue: str, *, by: str | None = None) -> QueueInfo:
        """Pause `queue` for every worker: their next claim skips its runs (running ones
        finish). `by` is recorded (who paused it: the dashboard's user, the CLI's)."""
        self.store.set_queue_paused(check_queue(queue), True, by)
        return self._queue(queue)

    def resume_queue(self, queue: str, *, by: str | None = None) -> QueueInfo:
        """Resume a paused queue: its due runs are claimed at the workers' next poll."""
        self.store.set_queue_paused(check_queue(queue), False, by)
        return self._queue(queue)

    def list_queues(self) -> list[QueueInfo]:
        """The queues with pending or running runs, and the paused ones, by name."""
        return self.store.list_queues()

    def _queue(self, queue: str) -> QueueInfo:
        return next((q for q in self.store.list_queues() if q.name == queue), QueueInfo(queue, False))

    def check_declared(self, task: str) -> str:
        """`task` if this process or some worker (rota_tasks, written at its start) declares
        it; else ConfigurationError naming it and the declared ones."""
        if task in self.tasks:
            return task
        known = self.store.declared_tasks()
        if task in known:
            return task
        listed = (
            ", ".join(known[:20]) + (", ..." if len(known) > 20 else "") if known else "none yet: start a worker first"
        )
        raise ConfigurationError(
            f"unknown task {task!r}{did_you_mean(task, known)}: no worker declares it; declared tasks: {listed}"
        )


# -- changes made as data (the CLI's and the dashboard's) ----------------------------------------
# The fields a schedule given as data may have (App.add_schedule's arguments).
SCHEDULE_FIELDS = frozenset({
    "name", "task", "cron", "every", "tz", "args", "kwargs", "overlap", "misfire", "misfire_grace",
    "run_immediately", "jitter", "queue", "priority", "retries", "timeout", "backoff", "notify_on",
})  # fmt: skip
UPDATE_FIELDS = SCHEDULE_FIELDS - {"name"}


def audit(by: str, action: str, target: str, **fields: Any) -> None:
    """One info line per change an operator makes (event `operator_change`): who, what, on what."""
    shown = " ".join(f"{k}={v!r}" for k, v in fields.items() if v is not None)
    log_event(log, logging.INFO, "operator_change", f"{action} {target} by {by}" + (f" ({shown})" if shown else ""),
              action=action, target=target, by=by, **fields)  # fmt: skip


def check_fields(given: Mapping[str, Any], allowed: frozenset[str], what: str) -> None:
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise ConfigurationError(
            f"unknown {what} field {unknown[0]!r}{did_you_mean(unknown[0], allowed)}; valid: {', '.join(sorted(allowed))}"
        )


def add_schedule(app: App, fields: Mapping[str, Any], by: str) -> ScheduleInfo:
    """App.add_schedule from data (a JSON object, the CLI's options), its task checked against
    the declared ones first: an unknown task is refused, not stored."""
    check_fields(fields, SCHEDULE_FIELDS, "schedule")
    options = dict(fields)
    name, task = options.pop("name", None), options.pop("task", None)
    if not isinstance(name, str) or not isinstance(task, str):
        raise ConfigurationError(f"a schedule needs a name and a task (strings), got name={name!r}, task={task!r}")
    app.check_declared(task)
    info = app.add_schedule(name, task, **options)
    audit(by, "schedule_add", name, task=task, cron=info.cron, every=info.every)
    return info


def update_schedule(app: App, name: str, changes: Mapping[str, Any], by: str) -> ScheduleInfo:
    check_fields(changes, UPDATE_FIELDS, "schedule")
    if not changes:
        raise ConfigurationError(
            f"nothing to change in schedule {name!r}: give one of {', '.join(sorted(UPDATE_FIELDS))}"
        )
    if "task" in changes:
        app.check_declared(str(changes["task"]))
    info = app.update_schedule(name, **changes)
    audit(by, "schedule_update", name, changed=",".join(sorted(changes)))
    return info


def remove_schedule(app: App, name: str, by: str) -> None:
    app.get_schedule(name)  # ScheduleNotFound (with a hint) for an unknown name
    app.remove_schedule(name)
    audit(by, "schedule_remove", name)


def enqueue(app: App, task: str, fields: Mapping[str, Any], by: str, *, by_name: bool = True) -> tuple[str, bool]:
    """One run of `task`, from data (the dashboard's API, `rota enqueue TASK`). If `app`
    declares the task, as `task.options(...).enqueue(*args, **kwargs)` does it: the code's
    options (retries, timeout, backoff, limit, rate, queue, priority) unless given, and the
    arguments checked against the handler. Else by name, if `by_name` and some worker declares
    it: its options in code are not known here, so the run has the defaults (queue 'default',
    priority 0, no retries, no timeout) unless given, and its arguments are not checked; if not
    `by_name`, refused (ConfigurationError saying how). Returns (id, created)."""
    check_fields(fields, ENQUEUE_FIELDS, "enqueue")
    declared = app.tasks.get(task)
    if declared is not None:
        run_id, created, queue = _enqueue_declared(declared, fields)
    else:
        app.check_declared(task)
        if not by_name:
            raise ConfigurationError(
                f"task {task!r} is declared by a worker but not by this dashboard's App, so its options "
                "(retries, timeout, limit, rate, queue) and arguments cannot be checked here: serve the "
                'dashboard with the App that declares it, or send "defaults": true to enqueue by name '
                "with the default options (no retries, no timeout)"
            )
        run_id, created, queue = _enqueue_by_name(app, task, fields)
    audit(by, "enqueue", task, run=run_id, queue=queue, created=created)
    return run_id, created


def _arguments(fields: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any], float]:
    args, kwargs = fields.get("args", []), fields.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise ConfigurationError(f"args must be a JSON array and kwargs a JSON object, got {args!r} and {kwargs!r}")
    delay = fields.get("delay", 0.0)
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not 0 <= delay <= 36500 * 86400:
        raise ConfigurationError(f"delay must be a number of seconds from 0 to {36500 * 86400}, got {delay!r}")
    return args, kwargs, float(delay)


def _enqueue_declared(task: Task[..., Any], fields: Mapping[str, Any]) -> tuple[str, bool, str]:
    """As the code enqueues it (rota.tasks.TaskCall): its options, its argument check."""
    args, kwargs, delay = _arguments(fields)
    call = task.options(
        delay=delay or None, priority=fields.get("priority"), queue=fields.get("queue"), key=fields.get("key"),
        retries=fields.get("retries"), timeout=fields.get("timeout"), unique_for=fields.get("unique_for"),
        after=fields.get("after"),
    )  # fmt: skip
    handle = call.enqueue(*args, **kwargs)
    return handle.id, handle.created, call.opts.queue


def _enqueue_by_name(app: App, task: str, fields: Mapping[str, Any]) -> tuple[str, bool, str]:
    """Without the task's code: the default options unless given, the arguments unchecked."""
    if "unique_for" in fields or "after" in fields:
        raise ConfigurationError(f"unique_for and after need the code that declares task {task!r}")
    opts = TaskOptions(queue=fields.get("queue") or "default", priority=check_int("priority", fields.get("priority", 0),
                       low=-(2**31), high=2**31 - 1), retries=fields.get("retries", 0), timeout=fields.get("timeout"))  # fmt: skip
    args, kwargs, delay = _arguments(fields)
    a, k = encode_arguments(task, args, kwargs)
    key = fields.get("key")
    if key is not None and not isinstance(key, str):
        raise ConfigurationError(f"key must be a string, got {key!r}")
    new = NewRun(task=task, args=a, kwargs=k, queue=opts.queue, priority=opts.priority, delay=delay, key=key,
                 max_attempts=opts.max_attempts, timeout=opts.timeout)  # fmt: skip
    ((run_id, created),) = app.store.insert_runs([new])
    return str(run_id), created, opts.queue


ENQUEUE_FIELDS = frozenset(
    {"args", "kwargs", "queue", "priority", "retries", "timeout", "delay", "key", "unique_for", "after"}
)


def cli_user() -> str:
    """Who made a change from the CLI, for the audit line: user@host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"cli:{user}@{socket.gethostname()}"


# -- notify_on of stored schedules ---------------------------------------------------------------
NOTIFY_ON_REFRESH = 5.0  # seconds between a worker's reads of the stored notify_on words


def refresh_notify_on(app: Any, loaded: set[str]) -> set[str]:
    """Give this process's notifiers the notify_on= of the stored schedules (a schedule declared
    in code keeps its own); forget those of schedules no longer stored with one. `loaded`: the
    names set by the previous refresh; returns this one's. A damaged value is reported once
    (rota.quarantine) and ignored."""
    found: dict[str, tuple[str, ...]] = {}
    for name, raw in app.store.stored_notify_on():
        if name in app.schedules:
            continue
        try:
            words = check_notify_on(tuple(json.loads(raw)))
        except (*quarantine.UNDECODABLE, TypeError, ConfigurationError) as exc:
            quarantine.report("schedule", name, f"its stored notify_on {raw!r} cannot be read: {exc}")
            continue
        if words is not None:
            found[name] = words
    for name in loaded - found.keys():
        app.events.set_notify_on(name, None)
    for name, words in found.items():
        if app.events.notify_on.get(name) != words:
            app.events.set_notify_on(name, words)
    return set(found)


async def notify_on_forever(app: Any, db: Any) -> None:
    """A worker's task: refresh_notify_on every NOTIFY_ON_REFRESH seconds while its App has a
    notifier (without one there is nothing to do: no query)."""
    loaded: set[str] = set()
    while True:
        if any(hook.notifier is not None for hook in getattr(app.events, "hooks", ())):
            with contextlib.suppress(DatabaseError):  # an outage: the next pass reads again
                loaded = await db(refresh_notify_on, app, loaded)
        await asyncio.sleep(NOTIFY_ON_REFRESH)
