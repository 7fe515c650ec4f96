"""The records of schedules the store passes to and from the ticker: a schedule's definition,
a due schedule and the plan of its ticks (re-exported by rota.stores.base)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime


@dataclass(slots=True)
class ScheduleDef:
    """A schedule's definition as written by code (`@app.schedule`) or `add_schedule`."""

    name: str
    task: str
    cron: str | None
    every: float | None
    tz: str
    args: str
    kwargs: str
    overlap: str
    misfire: str
    misfire_grace: float
    run_immediately: bool
    queue: str
    priority: int
    max_attempts: int
    timeout: float | None
    backoff: str | None
    source: str
    app: str | None
    definition: str
    jitter: float | None = None  # seconds: see rota.timing.jitter


@dataclass(slots=True)
class DueSchedule:
    """A schedule whose next tick has come, with what is needed to plan and insert runs."""

    name: str
    task: str
    cron: str | None
    every: float | None
    tz: str
    args: str
    kwargs: str
    overlap: str
    misfire: str
    misfire_grace: float
    queue: str
    priority: int
    max_attempts: int
    timeout: float | None
    backoff: str | None
    next_run_at: datetime
    # The stored next fire time does not decode (out of range, written by hand): next_run_at
    # is datetime.min and the ticker skips the schedule, warning once, until it is repaired.
    corrupt: bool = False
    jitter: float | None = None  # seconds: each tick's run is due a stable offset late
    # Why it cannot be planned (a damaged row: rota.timing.stored), one line; the ticker
    # sets it aside (rota.quarantine) and the other schedules run.
    damage: str | None = None


@dataclass(slots=True)
class Materialization:
    """The outcome of planning a schedule's due ticks (see `rota.timing.plan_ticks`).

    `ahead`: the schedule's next tick, not due yet, to be inserted now as a pending run due
    at the tick (so at the tick a worker just claims it); `next_run_at` is then the tick
    after it. The store refuses it (and sets next_run_at to `ahead` instead, so the tick is
    planned when it comes) while the schedule is exclusive and has an active run, and then
    clears `ahead` on this object: after `materialize` it says what was written."""

    run: Sequence[datetime]
    skipped: Sequence[tuple[datetime, str]]
    skipped_more: int
    next_run_at: datetime
    ahead: datetime | None = None
