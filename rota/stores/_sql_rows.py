"""Decoding rows of the SQL stores into runs, schedules and due schedules: a damaged field
reads as empty and is named, so one bad row does not break every listing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from ..models import Run, ScheduleInfo
from ..timing.jitter import stored_due
from ._sql_base import Row, SqlBase
from .base import (
    DueSchedule,
)

# What decoding a damaged stored value raises: a time out of Python's range (ValueError,
# OverflowError, OSError from fromtimestamp), a value of the wrong type, and JSON nested
# deeper than the decoder's recursion limit (RecursionError).
_UNDECODABLE = (ValueError, OverflowError, OSError, TypeError, RecursionError)
_MIN = datetime.min.replace(tzinfo=UTC)


class SqlRows(SqlBase):
    """Rows to models (times through the backend's `_dt`)."""

    def _due_time(self, value: Any) -> datetime | None:
        """The soonest due time of poll_state. One that does not decode (a damaged row) reads
        as due now: the ticker looks, skips that row and runs the others."""
        try:
            return self._dt(value)
        except _UNDECODABLE:
            return _MIN

    def _due_from_row(self, r: Row) -> DueSchedule:
        """A due schedule; one whose next fire time does not decode (a time out of Python's
        range, written by hand) is marked `corrupt`: the ticker skips it, the others run."""
        corrupt = False
        try:
            next_run_at = self._dt(r[15]) or _MIN
        except _UNDECODABLE:
            next_run_at, corrupt = _MIN, True
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
            next_run_at=next_run_at,
            corrupt=corrupt,
            jitter=r[16],
        )

    def _schedule_from_row(self, r: Row) -> ScheduleInfo:
        """As `_run_from_row`: a field that does not decode (a time out of range, JSON that is
        not valid, an interval too long for a timedelta) reads as empty and is named in
        `ScheduleInfo.corrupt`, so one damaged schedule does not break every listing."""
        corrupt: list[str] = []

        def when(i: int, field: str) -> datetime | None:
            try:
                return self._dt(r[i])
            except _UNDECODABLE:
                corrupt.append(field)
                return None

        def seconds(i: int, field: str) -> timedelta | None:
            try:
                return timedelta(seconds=r[i]) if r[i] is not None else None
            except _UNDECODABLE:
                corrupt.append(field)
                return None

        return ScheduleInfo(
            name=r[0],
            task=r[1],
            cron=r[2],
            every=seconds(3, "every"),
            tz=r[4],
            args=_loads(r[5], [], "args", corrupt) or [],
            kwargs=_loads(r[6], {}, "kwargs", corrupt) or {},
            overlap=r[7],
            misfire=r[8],
            misfire_grace=seconds(9, "misfire_grace") or timedelta(0),
            queue=r[10],
            priority=r[11],
            max_attempts=r[12],
            timeout=r[13],
            source=r[14],
            active=bool(r[15]),
            paused=bool(r[16]),
            next_run_at=_shown_next(r[0], when(17, "next_run_at"), r[29], r[2], r[3], r[4]),
            last_run_at=when(18, "last_run_at"),
            last_status=r[19],
            run_count=r[20],
            success_count=r[21],
            failure_count=r[22],
            skip_count=r[23],
            plan_error=r[28],
            corrupt=tuple(corrupt),
            jitter=timedelta(seconds=r[29]) if r[29] else None,
        )

    def _run_from_row(self, r: Row) -> Run:
        """One decoding path for every run read: a field that does not decode (JSON that is not
        valid, a time past year 9999) is named in `Run.corrupt` and read as empty, so that one
        bad row does not break every listing."""
        corrupt: list[str] = []

        def when(i: int, field: str) -> datetime | None:
            try:
                return self._dt(r[i])
            except _UNDECODABLE:
                corrupt.append(field)
                return datetime.max.replace(tzinfo=UTC)

        def required(i: int, field: str) -> datetime:
            return when(i, field) or datetime.max.replace(tzinfo=UTC)

        return Run(
            id=str(r[0]),
            task=r[1],
            status=r[2],
            queue=r[3],
            priority=r[4],
            args=_loads(r[5], [], "args", corrupt),
            kwargs=_loads(r[6], {}, "kwargs", corrupt),
            key=r[7],
            schedule=r[8],
            scheduled_for=required(9, "scheduled_for"),
            due_at=required(10, "due_at"),
            attempt=r[11],
            max_attempts=r[12],
            timeout=r[13],
            worker=r[14],
            token=r[15],
            lease_until=when(16, "lease_until"),
            cancel_requested=bool(r[17]),
            created_at=required(18, "created_at"),
            started_at=when(19, "started_at"),
            finished_at=when(20, "finished_at"),
            result=_loads(r[21], None, "result", corrupt),
            error=_loads(r[22], None, "error", corrupt),
            history=_loads(r[23] or "[]", [], "attempts", corrupt),
            retry_of=str(r[24]) if r[24] is not None else None,
            queued=bool(r[25]),
            waiting_on=int(r[26] or 0),
            backfill=bool(r[27]),
            corrupt=tuple(corrupt),
        )


def _loads(text: str | None, fallback: Any, field: str, corrupt: list[str]) -> Any:
    """Decode a stored JSON field; a damaged one reads as `fallback` and is named in `corrupt`
    (one bad row must not break every listing)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested too deeply to decode here
        corrupt.append(field)
        return fallback


def _iso(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def _shown_next(
    name: str, tick: datetime | None, jitter: float | None, cron: str | None, every: float | None, tz: str
) -> datetime | None:
    """next_run_at as shown: when the next tick's run is due (the tick plus its jitter)."""
    return stored_due(name, tick, jitter, cron, every, tz) if tick is not None else None
