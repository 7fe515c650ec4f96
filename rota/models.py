"""Snapshot records returned to users: a run, a schedule, a lock, a worker.

They are plain frozen dataclasses read from the database; changing one changes nothing in
the database (the lesson of stale full-row saves: shared state is only ever written by the
store's atomic operations).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from .errors import RunNotFound

PENDING: Final = "pending"
RUNNING: Final = "running"
SUCCEEDED: Final = "succeeded"
FAILED: Final = "failed"
SKIPPED: Final = "skipped"
CANCELLED: Final = "cancelled"

STATUSES: Final = (PENDING, RUNNING, SUCCEEDED, FAILED, SKIPPED, CANCELLED)
FINAL_STATUSES: Final = frozenset({SUCCEEDED, FAILED, SKIPPED, CANCELLED})
# A run's fields stored as JSON (named in Run.corrupt when they do not decode).
JSON_FIELDS: Final = frozenset({"args", "kwargs", "result", "error", "attempts"})


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


@dataclass(frozen=True, slots=True)
class Run:
    """One run of a task: an enqueued call, a schedule tick or a manual trigger.

    `attempt` counts the attempts made so far (an attempt counts when its handler starts);
    `attempts` lists every attempt, earlier ones from the history log and the current/last
    one from the run's own columns. `held`: claimed by a worker, its handler not started
    (status running, `started_at` None); `queued`: a tick waiting behind its schedule's
    active run (overlap="queue", or the successor of a replaced run). See rota/lifecycle.py.
    """

    id: str
    task: str
    status: str
    queue: str
    priority: int
    args: list[Any]
    kwargs: dict[str, Any]
    key: str | None
    schedule: str | None
    scheduled_for: datetime
    due_at: datetime
    attempt: int
    max_attempts: int
    timeout: float | None
    worker: str | None
    token: int | None
    lease_until: datetime | None
    cancel_requested: bool
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    result: Any
    error: dict[str, Any] | None
    history: list[dict[str, Any]] = field(default_factory=list)
    retry_of: str | None = None
    queued: bool = False
    # after=: how many parents have yet to succeed (the run waits, pending and queued, until 0)
    waiting_on: int = 0
    backfill: bool = False  # made by App.backfill for a past tick (not by the schedule at the time)
    # The stored fields that could not be decoded (a row written by hand, by an older rota, or
    # damaged): JSON that is not valid, a time past year 9999. They read as [] / {} / None (a
    # time as datetime.max) here and as null in to_json(), with a "corrupt" note saying why.
    corrupt: tuple[str, ...] = ()
    # Durable steps (rota/durable.py), read by App.get_run (not by listings): each saved step
    # {name, seq, attempt, started_at, finished_at, outcome, error}; what a pending run waits
    # for: a parked run's wait {kind: sleep|signal, signal, until, since}, or the window of the
    # rate it is over {kind: rate, rate, key, until}; the last progress {fraction, message, at}.
    steps: list[dict[str, Any]] = field(default_factory=list)
    waiting: dict[str, Any] | None = None
    progress: dict[str, Any] | None = None

    @property
    def is_final(self) -> bool:
        return self.status in FINAL_STATUSES

    @property
    def held(self) -> bool:
        """Claimed by a worker, its handler not started yet (no attempt counted for it)."""
        return self.status == RUNNING and self.started_at is None

    @property
    def duration(self) -> timedelta | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.started_at

    @property
    def attempts(self) -> list[dict[str, Any]]:
        """Every attempt's outcome, oldest first (earlier ones kept in history)."""
        entries = list(self.history)
        if self.started_at is not None and self.status != PENDING:
            entries.append(
                {
                    "attempt": self.attempt,
                    "worker": self.worker,
                    "started_at": _iso(self.started_at),
                    "finished_at": _iso(self.finished_at),
                    "status": self._last_attempt_status(),
                    # a running attempt has no outcome yet: the row's error is an earlier one's
                    "error": None if self.status == RUNNING else self.error,
                }
            )
        return entries

    def _last_attempt_status(self) -> str:
        """How the last attempt ended, labelled as earlier ones are in history: `lost` (its
        worker's lease ran out) and `timed out` rather than the run's final status."""
        kind = self.error.get("type") if isinstance(self.error, dict) else None
        if self.status in (FAILED, CANCELLED) and kind == "WorkerLost":
            return "lost"
        if self.status == FAILED and kind == "Timeout":
            return "timed out"
        return self.status

    def to_json(self) -> dict[str, Any]:
        """The CLI/API shape (`--json`, the JSON API): these field names, times as ISO-8601 UTC."""
        return (
            {
                "id": self.id,
                "task": self.task,
                "schedule": self.schedule,
                "status": self.status,
                "attempt": self.attempt,
                "max_attempts": self.max_attempts,
                "queue": self.queue,
                "priority": self.priority,
                "key": self.key,
                "args": self.args,
                "kwargs": self.kwargs,
                "scheduled_for": _iso(self.scheduled_for),
                "created_at": _iso(self.created_at),
                "started_at": _iso(self.started_at),
                "finished_at": _iso(self.finished_at),
                "worker": self.worker,
                "token": self.token,
                "lease_until": _iso(self.lease_until),
                "cancel_requested": self.cancel_requested,
                "held": self.held,
                "result": self.result,
                "error": self.error,
                "attempts": self.attempts,
                "retry_of": self.retry_of,
                "backfill": self.backfill,
            }
            | self._durable_json()
            | self._corrupt_json()
        )

    def _durable_json(self) -> dict[str, Any]:
        """steps / waiting / progress, for a run that has them (App.get_run's)."""
        out: dict[str, Any] = {}
        if self.steps:
            out["steps"] = self.steps
        if self.waiting is not None:
            out["waiting"] = self.waiting
        if self.progress is not None:
            out["progress"] = self.progress
        return out

    @property
    def corrupt_reason(self) -> str | None:
        """Why this row is shown as corrupt (None if it decoded whole), e.g. 'stored args not
        valid JSON; stored scheduled_for not a valid time'."""
        if not self.corrupt:
            return None
        json_fields = [f for f in self.corrupt if f in JSON_FIELDS]
        time_fields = [f for f in self.corrupt if f not in JSON_FIELDS]
        parts = [f"stored {', '.join(json_fields)} not valid JSON"] if json_fields else []
        parts += [f"stored {', '.join(time_fields)} not a valid time"] if time_fields else []
        return "; ".join(parts)

    def _corrupt_json(self) -> dict[str, Any]:
        if not self.corrupt:
            return {}
        shown = {"scheduled_for", "created_at", "started_at", "finished_at", "lease_until", *JSON_FIELDS}
        return {"corrupt": self.corrupt_reason, **dict.fromkeys(f for f in self.corrupt if f in shown)}


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A schedule as stored: its definition, state and counters."""

    name: str
    task: str
    cron: str | None
    every: timedelta | None
    tz: str
    args: list[Any]
    kwargs: dict[str, Any]
    overlap: str
    misfire: str
    misfire_grace: timedelta
    queue: str
    priority: int
    max_attempts: int
    timeout: float | None
    source: str
    active: bool
    paused: bool
    next_run_at: datetime | None
    last_run_at: datetime | None
    last_status: str | None
    run_count: int
    success_count: int
    failure_count: int
    skip_count: int
    # Why the last worker could not plan it (unknown zone, bad cron); it is not due until an
    # update, a resume or a changed code definition gives it a next fire time again.
    plan_error: str | None = None
    # The stored fields that could not be decoded (a row written by hand or damaged): a time
    # out of range, JSON that is not valid. They read as None / [] / {}; a worker skips a
    # schedule whose next_run_at is corrupt (warning once) until it is repaired by an
    # update, or a pause and resume, which plans it again.
    corrupt: tuple[str, ...] = ()
    # It fires more often than the App's high_frequency threshold (ROTA_HIGH_FREQUENCY, default
    # every 60 s): set by App.list_schedules() / get_schedule(), False from a bare store.
    high_frequency: bool = False
    jitter: timedelta | None = None  # each tick's run is due a stable offset in [0, jitter) late
    # Why every worker's ticker sets it aside (a damaged row: a field that cannot be planned,
    # e.g. "every=nan is not a number of seconds above 0 ..."); None when it can be planned.
    damage: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "task": self.task,
            "cron": self.cron,
            "every": self.every.total_seconds() if self.every is not None else None,
            "tz": self.tz,
            "overlap": self.overlap,
            "misfire": self.misfire,
            "paused": self.paused,
            "active": self.active,
            "source": self.source,
            "next_run_at": _iso(self.next_run_at),
            "last_run_at": _iso(self.last_run_at),
            "last_status": self.last_status,
            "run_count": self.run_count,
            "success_count": self.success_count,
            "failure_count": self.failure_count,
            "skip_count": self.skip_count,
            "plan_error": self.plan_error,
            "corrupt": list(self.corrupt),
            "damage": self.damage,
            "high_frequency": self.high_frequency,
            "jitter": self.jitter.total_seconds() if self.jitter is not None else None,
            "args": self.args,
            "kwargs": self.kwargs,
        }


@dataclass(frozen=True, slots=True)
class LockInfo:
    name: str
    owner: str | None
    token: int
    acquired_at: datetime | None
    expires_at: datetime | None
    held: bool
    # The stored fields that could not be read (a damaged row): they read as None / 0.
    corrupt: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "owner": self.owner,
            "token": self.token,
            "acquired_at": _iso(self.acquired_at),
            "expires_at": _iso(self.expires_at),
            "held": self.held,
            "corrupt": list(self.corrupt),
        }


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """A queue with active runs or paused fleet-wide (App.pause_queue)."""

    name: str
    paused: bool
    pending: int = 0
    running: int = 0
    paused_at: datetime | None = None
    paused_by: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "paused": self.paused,
            "pending": self.pending,
            "running": self.running,
            "paused_at": _iso(self.paused_at),
            "paused_by": self.paused_by,
        }


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    id: str
    host: str
    pid: int
    concurrency: int
    queues: list[str] | None
    state: str
    started_at: datetime | None  # None only in a damaged row (see corrupt)
    last_seen: datetime | None
    alive: bool
    stuck: int = 0  # handler threads still running after a timeout or a lost lease
    # The stored fields that could not be read (a damaged row): they read as None / 0, and a
    # worker whose last_seen cannot be read is not alive.
    corrupt: tuple[str, ...] = ()
    # its own lease (seconds): alive while its last heartbeat is younger than this; None for a
    # worker of an older release (judged by the viewer's lease)
    lease: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "host": self.host,
            "pid": self.pid,
            "concurrency": self.concurrency,
            "queues": self.queues,
            "state": self.state,
            "started_at": _iso(self.started_at),
            "last_seen": _iso(self.last_seen),
            "alive": self.alive,
            "stuck": self.stuck,
            "lease": self.lease,
            "corrupt": list(self.corrupt),
        }


def iso(value: datetime | None) -> str | None:
    """ISO-8601 UTC with a 'Z', the format every CLI/API output uses."""
    return _iso(value)


def dumps(value: Any) -> str:
    return json.dumps(value, default=str)


def parse_run_id(run_id: object) -> int:
    """An int, or a string of ASCII digits only, as the API reads them: int() would also take
    '1_0' (10), '١' (an Arabic-Indic 1), '+1' and ' 1 '."""
    value = -1
    if isinstance(run_id, int) and not isinstance(run_id, bool):
        value = run_id
    elif isinstance(run_id, str) and run_id.isascii() and run_id.isdigit() and len(run_id) <= 19:
        value = int(run_id)
    if not 1 <= value <= 2**63 - 1:
        raise RunNotFound(
            f"no run with id {run_id!r}: run ids are integers from 1 to {2**63 - 1}, written in ASCII digits"
        )
    return value
