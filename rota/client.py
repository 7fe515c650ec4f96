"""The client operations on schedules, runs and workers: add/update/remove schedules,
inspection, pause/resume/trigger, cancel/retry, stats (mixed into App by rota.app)."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from . import timing, tracing
from .declare import Declarations, _filter, _stored_backoff, _task_options, build_schedule
from .errors import (
    ConfigurationError,
    RunNotFound,
    ScheduleNotFound,
    did_you_mean,
)
from .events import check_notify_on
from .limit_specs import stamp_lenient
from .models import FINAL_STATUSES, STATUSES, Run, ScheduleInfo, WorkerInfo
from .models import parse_run_id as _run_id
from .quarantine import DamagedRowError
from .serialization import encode_arguments
from .signals import SignalClient
from .stores.base import DueSchedule, NewRun, RunFilter, ScheduleDef, Store, run_stats
from .tasks import Backoff, RunHandle, Task, TaskOptions, check_int, check_schedule_call
from .timing.frequency import is_high_frequency

if TYPE_CHECKING:
    from .app import App
    from .worker import Worker

log = logging.getLogger("rota")


class Client(SignalClient, Declarations):
    """Operations on what is stored; App supplies the store (connected and migrated on first use)."""

    lease: float
    _workers: list[Worker]

    @property
    def store(self) -> Store:
        raise NotImplementedError  # App.store

    @property
    def database_label(self) -> str:
        raise NotImplementedError  # App.database_label

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
        jitter: timedelta | float | None = None,
        **task_options: Any,
    ) -> ScheduleInfo:
        """Create a schedule stored in the database; every running worker picks it up (its
        notify_on= within NOTIFY_ON_REFRESH seconds: rota.operate)."""
        notify_on = check_notify_on(task_options.pop("notify_on", None))
        task_name, base = self._task_ref(task)
        known = self._declared(task, name)
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
            jitter=jitter,
        )
        check_schedule_call(name, known, spec.args, spec.kwargs)
        store = self.store
        store.add_schedule(spec.to_def(source="api", app=None), spec.trigger.next_after(store.now()))
        self._store_notify_on(name, notify_on)
        return self.get_schedule(name)

    def _store_notify_on(self, name: str, words: tuple[str, ...] | None) -> None:
        """A stored schedule's notify_on=, in the database (for every worker) and here."""
        self.store.set_schedule_notify_on(name, json.dumps(list(words)) if words is not None else None)
        cast("App", self).events.set_notify_on(name, words)

    def _declared(self, task: Task[..., Any] | str, schedule: str) -> Task[..., Any] | None:
        """The task object if this process declares it (to check a schedule's arguments);
        a warning if it does not but declares others (a typo, or a task of another app)."""
        known = task if isinstance(task, Task) else self.tasks.get(task)
        if known is None and self.tasks:
            log.warning(
                "schedule %r names task %r, which this app does not register%s: its runs fail with "
                "TaskNotFound unless the workers' app registers it",
                schedule, task, did_you_mean(str(task), self.tasks),
            )  # fmt: skip
        return known

    def update_schedule(self, name: str, **changes: Any) -> ScheduleInfo:
        """Change a stored schedule; a new cron/every/tz recomputes its next fire time."""
        store = self.store
        current, info = self._stored_schedule(name)
        allowed = CHANGEABLE
        changes, notify = _notify_change(changes)
        unknown = sorted(set(changes) - allowed)
        if unknown:
            raise ConfigurationError(f"cannot update {unknown} of a schedule; changeable: {', '.join(sorted(allowed))}")
        check_repairable(info, {**changes, "next_run_at": None}, "update_schedule")  # it plans afresh
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
            args=changes["args"] if "args" in changes else json.loads(current.args),
            kwargs=changes["kwargs"] if "kwargs" in changes else json.loads(current.kwargs),
            options=options,
            jitter=changes.get("jitter", current.jitter),
        )
        known = self._declared(changes["task"], name) if "task" in changes else self.tasks.get(task_name)
        check_schedule_call(name, known, spec.args, spec.kwargs)
        # An error left it without a next time, or its stored next time cannot be read: plan it again.
        replan = timing_changed or info.plan_error is not None or "next_run_at" in info.corrupt
        store.update_schedule(
            spec.to_def(source="api", app=None), spec.trigger.next_after(store.now()) if replan else None
        )
        if notify[0]:
            self._store_notify_on(name, notify[1])
        return self.get_schedule(name)

    def _stored_schedule(self, name: str) -> tuple[ScheduleDef, ScheduleInfo]:
        """An active schedule stored as data (one declared in code is changed in the code)."""
        _filter("schedule name", name)
        current = self.store.get_schedule_def(name)
        if current is None or (info := self.store.get_schedule(name)) is None or not info.active:
            raise ScheduleNotFound(f"no active schedule named {name!r}")
        if current.source == "code":
            raise ConfigurationError(
                f"schedule {name!r} is declared in code (@app.schedule); change it there, it is re-synced when workers start"
            )
        return current, info

    def remove_schedule(self, name: str) -> None:
        """Deactivate a schedule: it stops firing, its pending runs are cancelled, history stays."""
        _filter("schedule name", name)
        self.store.remove_schedule(name)

    # -- inspection ----------------------------------------------------------------------
    def get_run(self, run_id: str | int) -> Run:
        run = self.store.get_run(_run_id(run_id))
        if run is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        return self._with_durable(run)

    def run_links(self, run_id: str | int) -> dict[str, Any]:
        """A run's `after=` links: {"parents": [ids], "dependents": [ids], "waiting_on": n},
        ids as strings; `waiting_on` counts the parents that have yet to succeed."""
        run = self.get_run(run_id)
        parents, dependents = self.store.run_links(int(run.id))
        return {
            "parents": [str(i) for i in parents],
            "dependents": [str(i) for i in dependents],
            "waiting_on": run.waiting_on,
        }

    def list_runs(
        self,
        status: str | None = None,
        task: str | None = None,
        schedule: str | None = None,
        limit: int = 100,
        *,
        queue: str | None = None,
        before: str | int | None = None,
        damaged: bool = False,
    ) -> list[Run]:
        """Runs, newest first, filtered by status/task/schedule/queue; `before` pages by id;
        `damaged`: only the runs set aside as damaged (failed with error type DamagedRow)."""
        status = damaged_status(status, damaged)
        check_int("limit", limit, low=1, high=100_000)
        task, schedule, queue = _filter("task", task), _filter("schedule", schedule), _filter("queue", queue)
        flt = RunFilter(status, task, schedule, queue, limit, _run_id(before) if before is not None else None, damaged)
        return self._with_waits(self.store.list_runs(flt))  # a parked run says what it waits for

    def list_schedules(self, *, include_inactive: bool = False) -> list[ScheduleInfo]:
        return [self._marked(s) for s in self.store.list_schedules(include_inactive)]

    def get_schedule(self, name: str) -> ScheduleInfo:
        _filter("schedule name", name)
        info = self.store.get_schedule(name)
        if info is None:
            known = [s.name for s in self.store.list_schedules(True)]
            raise ScheduleNotFound(f"no schedule named {name!r}{did_you_mean(name, known)}")
        return self._marked(info)

    def _marked(self, info: ScheduleInfo) -> ScheduleInfo:
        """`info` with high_frequency set against this App's threshold."""
        if not is_high_frequency(info.cron, info.every, info.tz, cast("App", self).high_frequency):
            return info
        return dataclasses.replace(info, high_frequency=True)

    def list_workers(self, *, stale_after: float | None = None) -> list[WorkerInfo]:
        """Workers seen recently. One whose last heartbeat is older than `stale_after` (default:
        this App's lease, the longest a live worker goes between heartbeats with room to spare)
        reads `lost`, not alive, at once: its runs are being rescued."""
        return self.store.list_workers(stale_after if stale_after is not None else self.lease)

    def stats(self) -> dict[str, Any]:
        """Counts by status, live workers and their capacity, this process's worker ids."""
        store = self.store
        runs = run_stats(store.run_counts())
        counts = runs["runs"]
        workers = [w for w in self.list_workers() if w.alive]
        local = [w for w in self._workers if w.state in ("running", "draining")]
        ours = {w.id for w in local}  # this process's workers: their own live count, not the registry's
        stuck = sum(w.stuck for w in workers if w.id not in ours) + sum(w.stuck for w in local)
        return {
            **runs,
            "running": counts["running"],
            "pending": counts["pending"],
            "workers": len(workers),
            "capacity": sum(w.concurrency for w in workers),
            "stuck": stuck,
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
        check_repairable(info, {"next_run_at": None}, "resume")
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
        check_repairable(info, {"next_run_at": None}, "trigger")
        due = DueSchedule(**_due_fields(sdef), next_run_at=info.next_run_at or store.now())
        run_id, outcome = store.trigger(due)
        handle = RunHandle(cast("App", self), str(run_id))
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
        return self._retry(run_id)

    def _retry(self, run_id: str | int, retried: set[str] | None = None) -> RunHandle:
        """As retry; with `retried` (App.retry_many), a retry of a schedule named there
        queues behind the one made before it instead of replacing it (overlap='replace'),
        and the schedule of each retry made is added."""
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
            behind = sdef.overlap == "replace" and retried is not None and sdef.name in retried
            due = DueSchedule(**{**_due_fields(sdef), "overlap": "queue" if behind else sdef.overlap, "task": run.task, "args": args, "kwargs": kwargs,
                                 "queue": run.queue, "priority": run.priority, "max_attempts": run.max_attempts,
                                 "timeout": run.timeout, "backoff": backoff, "next_run_at": self.store.now()})  # fmt: skip
            new_id, _ = self.store.trigger(due, key=key, retry_of=int(run.id), once=retried is not None)
            if retried is not None:
                retried.add(sdef.name)
            return RunHandle(cast("App", self), str(new_id))
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
            traceparent=None if tracing.API is None else tracing.current_traceparent(),
        )
        task = getattr(self, "tasks", {}).get(run.task)  # declared here: its limit and rate hold
        if task is not None:
            stamp_lenient(new, task, run.args, run.kwargs)
        ((new_id, _),) = self.store.insert_runs([new])
        return RunHandle(cast("App", self), str(new_id))


# What update_schedule() changes.
CHANGEABLE = frozenset({"cron", "every", "tz", "args", "kwargs", "overlap", "misfire", "misfire_grace", "run_immediately",
                        "task", "queue", "priority", "retries", "timeout", "backoff", "jitter", "notify_on"})  # fmt: skip


def _notify_change(changes: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[bool, tuple[str, ...] | None]]:
    """update_schedule's changes without notify_on, and (whether it is given, its words)."""
    rest = dict(changes)
    return rest, ("notify_on" in rest, check_notify_on(rest.pop("notify_on", None)))


# The stored fields of a damaged schedule and the update_schedule() argument that repairs each.
_REPAIRED_BY = {"every": "every", "misfire_grace": "misfire_grace", "jitter": "jitter", "timeout": "timeout",
                "priority": "priority", "max_attempts": "retries", "args": "args", "kwargs": "kwargs",
                "overlap": "overlap", "misfire": "misfire", "next_run_at": "next_run_at"}  # fmt: skip


def check_repairable(info: ScheduleInfo, changes: Mapping[str, Any], action: str) -> None:
    """Refuse, in one line, to act on a damaged schedule (ScheduleInfo.damage) unless
    `changes` replace every damaged field: update_schedule() repairs what it is given, a
    resume gives a new next fire time, a trigger needs nothing else to be damaged."""
    left = [f for f in info.corrupt if f in _REPAIRED_BY and _REPAIRED_BY[f] not in changes and not
            (f == "every" and "cron" in changes)]  # fmt: skip
    if not left or info.damage is None:
        return
    given = ", ".join(f"{_REPAIRED_BY[f]}=" for f in left if f != "next_run_at")
    fix = f"update_schedule({info.name!r}, {given}...)" if given else "a pause and resume"
    raise DamagedRowError(
        f"schedule {info.name!r} is damaged ({info.damage}): {action} cannot use it; repair it with {fix}"
    )


def damaged_status(status: str | None, damaged: bool) -> str | None:
    """A listing's status, checked: `damaged` (runs set aside as damaged) implies `failed`."""
    if status is not None and status not in STATUSES:
        raise ConfigurationError(
            f"unknown status {status!r}{did_you_mean(status, STATUSES)}; valid: {', '.join(STATUSES)}"
        )
    return "failed" if damaged and status is None else status  # (another status: none is damaged)


def _due_fields(sdef: ScheduleDef) -> dict[str, Any]:
    """A schedule definition's fields that a DueSchedule shares (all but next_run_at)."""
    names = ("name", "task", "cron", "every", "tz", "args", "kwargs", "overlap", "misfire", "misfire_grace",
             "queue", "priority", "max_attempts", "timeout", "backoff")  # fmt: skip
    return {n: getattr(sdef, n) for n in names}
