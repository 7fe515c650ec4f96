"""Decoding schedule rows (a due schedule for the ticker, a ScheduleInfo for the listings).

One bad row never stops the others (rota.quarantine): a field that does not decode or plan
(a time out of range, JSON that is not valid, an `every` of NaN, a `jitter` that is text)
reads as empty, is named in `corrupt`, and the reason the ticker sets the schedule aside is
the same line from both decoders (rota.timing.stored), so it is logged once per process.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from ... import quarantine
from ...models import ScheduleInfo
from ...timing import stored
from ...timing.jitter import stored_due
from ..base import DueSchedule

Row = Sequence[Any]
Decode = Callable[[Any], datetime | None]
MIN = datetime.min.replace(tzinfo=UTC)

# The columns a due schedule and a ScheduleInfo row hold at different positions.
_DUE = {"every": 3, "misfire_grace": 9, "jitter": 16, "timeout": 13, "priority": 11, "max_attempts": 12, "args": 5,
        "kwargs": 6, "overlap": 7, "misfire": 8}  # fmt: skip
_INFO = {**_DUE, "jitter": 29}


def _when(dt: Decode, value: Any) -> tuple[datetime | None, bool]:
    try:
        return dt(value), False
    except quarantine.UNDECODABLE:
        return None, True


def due_from_row(dt: Decode, r: Row) -> DueSchedule:
    """A due schedule. One that cannot be planned is marked `corrupt` with the `damage`
    (one line): the ticker sets it aside, the others run. A next fire time that does not
    decode reads as datetime.min (the ticker skips it each pass: it cannot record a plan
    error against a time it cannot read)."""
    next_run_at, bad_time = _when(dt, r[15])
    found = stored.damage({field: r[i] for field, i in _DUE.items()})
    if bad_time:
        found.insert(0, stored.NEXT_RUN_AT)
    return DueSchedule(
        name=r[0],
        task=r[1],
        cron=r[2],
        every=r[3],
        tz=r[4],
        args=r[5],
        kwargs=r[6],
        overlap=r[7],
        misfire=r[8],
        misfire_grace=r[9],
        queue=r[10],
        priority=r[11],
        max_attempts=r[12],
        timeout=r[13],
        backoff=r[14],
        next_run_at=next_run_at or MIN,
        corrupt=bad_time,
        jitter=r[16],
        damage=stored.reason(found),
    )


def schedule_from_row(dt: Decode, r: Row) -> ScheduleInfo:
    """A listed schedule: each field that does not decode reads as empty (None, [], {},
    0) and is named in `corrupt`; `damage` says why the ticker sets it aside."""
    next_run_at, bad_next = _when(dt, r[17])
    last_run_at, bad_last = _when(dt, r[18])
    found = stored.damage({field: r[i] for field, i in _INFO.items()})
    if bad_next:
        found.insert(0, stored.NEXT_RUN_AT)
    bad = {field for field, _ in found}
    corrupt = [*(["next_run_at"] if bad_next else []), *(["last_run_at"] if bad_last else [])]
    corrupt += [field for field, _ in found if field != "next_run_at"]

    def ok(field: str, value: Any, empty: Any = None) -> Any:
        return empty if field in bad else value

    every, grace, jitter = ok("every", r[3]), ok("misfire_grace", r[9], 0), ok("jitter", r[29])
    return ScheduleInfo(
        name=r[0],
        task=r[1],
        cron=r[2],
        every=timedelta(seconds=every) if every is not None else None,
        tz=r[4],
        args=json.loads(r[5]) if "args" not in bad else [],
        kwargs=json.loads(r[6]) if "kwargs" not in bad else {},
        overlap=r[7],
        misfire=r[8],
        misfire_grace=timedelta(seconds=grace),
        queue=r[10],
        priority=ok("priority", r[11], 0),
        max_attempts=ok("max_attempts", r[12], 1),
        timeout=ok("timeout", r[13]),
        source=r[14],
        active=bool(r[15]),
        paused=bool(r[16]),
        next_run_at=_shown_next(r[0], next_run_at, jitter, r[2], every, r[4]),
        last_run_at=last_run_at,
        last_status=r[19],
        run_count=r[20],
        success_count=r[21],
        failure_count=r[22],
        skip_count=r[23],
        plan_error=r[28],
        corrupt=tuple(corrupt),
        jitter=timedelta(seconds=jitter) if jitter else None,
        damage=stored.reason(found),
    )


def _shown_next(
    name: str, tick: datetime | None, jitter: float | None, cron: str | None, every: float | None, tz: str
) -> datetime | None:
    """next_run_at as shown: when the next tick's run is due (the tick plus its jitter)."""
    if tick is None:
        return None
    try:
        return stored_due(name, tick, jitter, cron, every, tz)
    except quarantine.UNDECODABLE:  # a timing no worker plans: shown as stored
        return tick
