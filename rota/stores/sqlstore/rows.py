"""Decoding rows of the SQL stores into runs, schedules and due schedules: a damaged field
reads as empty and is named, so one bad row does not break every listing."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from ...models import Run, ScheduleInfo
from ..base import (
    DueSchedule,
)
from .base import Row, SqlBase
from .schedule_rows import due_from_row, schedule_from_row

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
        """A due schedule (see schedule_rows.py: a damaged one is marked, the others run)."""
        return due_from_row(self._dt, r)

    def _schedule_from_row(self, r: Row) -> ScheduleInfo:
        """A listed schedule (see schedule_rows.py: a damaged field reads as empty, named)."""
        return schedule_from_row(self._dt, r)

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
