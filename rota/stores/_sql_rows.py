"""Decoding rows of the SQL stores into runs, schedules and due schedules: a damaged field
reads as empty and is named, so one bad row does not break every listing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from ..models import Run, ScheduleInfo
from ._sql_base import Row, SqlBase
from .base import (
    DueSchedule,
)


class SqlRows(SqlBase):
    """Rows to models (times through the backend's `_dt`)."""

    def _due_from_row(self, r: Row) -> DueSchedule:
        next_run_at = self._dt(r[15])
        assert next_run_at is not None
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
        )

    def _schedule_from_row(self, r: Row) -> ScheduleInfo:
        return ScheduleInfo(
            name=r[0],
            task=r[1],
            cron=r[2],
            every=timedelta(seconds=r[3]) if r[3] is not None else None,
            tz=r[4],
            args=_loads(r[5], [], "args", []),
            kwargs=_loads(r[6], {}, "kwargs", []),
            overlap=r[7],
            misfire=r[8],
            misfire_grace=timedelta(seconds=r[9]),
            queue=r[10],
            priority=r[11],
            max_attempts=r[12],
            timeout=r[13],
            source=r[14],
            active=bool(r[15]),
            paused=bool(r[16]),
            next_run_at=self._dt(r[17]),
            last_run_at=self._dt(r[18]),
            last_status=r[19],
            run_count=r[20],
            success_count=r[21],
            failure_count=r[22],
            skip_count=r[23],
            plan_error=r[28],
        )

    def _run_from_row(self, r: Row) -> Run:
        """One decoding path for every run read: a field that does not decode (JSON that is not
        valid, a time past year 9999) is named in `Run.corrupt` and read as empty, so that one
        bad row does not break every listing."""
        corrupt: list[str] = []

        def when(i: int, field: str) -> datetime | None:
            try:
                return self._dt(r[i])
            except (ValueError, OverflowError, OSError, TypeError):
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
            corrupt=tuple(corrupt),
        )


def _loads(text: str | None, fallback: Any, field: str, corrupt: list[str]) -> Any:
    """Decode a stored JSON field; a damaged one reads as `fallback` and is named in `corrupt`
    (one bad row must not break every listing)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        corrupt.append(field)
        return fallback


def _iso(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")
