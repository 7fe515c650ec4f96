"""The time seam.

Every time-sensitive store operation takes "now" from a clock when one is configured and
otherwise from the database itself (hosts' clocks may disagree; the database's is the one
all workers share). Tests move time with a `FakeClock` instead of sleeping through minutes.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time as an aware UTC datetime."""
        ...


class FakeClock:
    """A clock that only moves when told to. Thread-safe."""

    def __init__(self, start: datetime | None = None) -> None:
        start = start or datetime.now(UTC)
        if start.tzinfo is None:
            raise ValueError("FakeClock needs an aware datetime")
        self._now = start.astimezone(UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, by: timedelta | float = 0.0, **units: float) -> datetime:
        """Move forward by a timedelta or seconds, or by units: `advance(minutes=5)`
        (weeks, days, hours, minutes, seconds, milliseconds). Returns the new time."""
        unknown = sorted(set(units) - {"weeks", "days", "hours", "minutes", "seconds", "milliseconds"})
        if unknown:
            raise ValueError(f"unknown unit {unknown[0]!r}; use weeks, days, hours, minutes, seconds or milliseconds")
        delta = (by if isinstance(by, timedelta) else timedelta(seconds=by)) + timedelta(**units)
        with self._lock:
            self._now += delta
            return self._now

    def set(self, when: datetime) -> None:
        if when.tzinfo is None:
            raise ValueError("FakeClock needs an aware datetime")
        with self._lock:
            self._now = when.astimezone(UTC)
