"""Decoding the registry rows, `rota_workers` and `rota_locks`, as one bad row never breaks a
listing (rota.quarantine): a field that does not decode (a time out of range, `queues` that
is not a JSON list, a number that is text) reads as empty, is named in the record's `corrupt`,
and the row is named once per process (event row_damaged). A worker whose heartbeat cannot be
read is not alive (its concurrency and stuck threads count nowhere)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from ... import quarantine
from ...config import MAX_SECONDS
from ...models import LockInfo, WorkerInfo

Row = Sequence[Any]
Decode = Callable[[Any], datetime | None]


class _Fields:
    """The damaged fields of one row, and what each read as instead."""

    def __init__(self, dt: Decode) -> None:
        self.dt = dt
        self.corrupt: list[str] = []

    def time(self, value: Any, field: str) -> datetime | None:
        try:
            return self.dt(value)
        except quarantine.UNDECODABLE:
            self.corrupt.append(field)
            return None

    def integer(self, value: Any, field: str, low: int = 0) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and value >= low:
            return value
        self.corrupt.append(field)
        return 0

    def seconds(self, value: Any, field: str) -> float | None:
        """A lease: None if not stored (an older release), else a number of seconds in
        (0, a year]; anything else (NaN, infinite, negative) is damaged and reads as None."""
        if value is None:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= MAX_SECONDS:
            return float(value)
        self.corrupt.append(field)
        return None

    def names(self, value: Any, field: str) -> list[str] | None:
        if value is None or value == "":
            return None
        try:
            names = json.loads(value)
        except (ValueError, TypeError, RecursionError):
            names = None
        if isinstance(names, list) and all(isinstance(n, str) for n in names):
            return names
        self.corrupt.append(field)
        return None

    def report(self, kind: str, key: object) -> tuple[str, ...]:
        if self.corrupt:
            shown = ", ".join(self.corrupt)
            quarantine.report(kind, key, f"stored {shown} cannot be read; listed with {shown} empty")
        return tuple(self.corrupt)


def worker_from_row(dt: Decode, r: Row, stuck: Any) -> WorkerInfo:
    """A `list_workers` row (id, host, pid, concurrency, queues, state, started_at, last_seen,
    alive, lease) and its `stuck` count. `alive` and `state` were judged in SQL by the worker's
    own lease, or by the viewer's where it has none or a damaged one."""
    f = _Fields(dt)
    started, seen = f.time(r[6], "started_at"), f.time(r[7], "last_seen")
    pid, concurrency, queues = f.integer(r[2], "pid"), f.integer(r[3], "concurrency"), f.names(r[4], "queues")
    threads = f.integer(stuck or 0, "stuck")
    lease = f.seconds(r[9] if len(r) > 9 else None, "lease")
    return WorkerInfo(
        id=str(r[0]),
        host=str(r[1]),
        pid=pid,
        concurrency=concurrency,
        queues=queues,
        state=str(r[5]),
        started_at=started,
        last_seen=seen,
        alive=bool(r[8]) and seen is not None,
        stuck=threads,
        corrupt=f.report(quarantine.WORKER, r[0]),
        lease=lease,
    )


def lock_from_row(dt: Decode, r: Row) -> LockInfo:
    """A `list_locks` row (name, owner, token, acquired_at, expires_at, held)."""
    f = _Fields(dt)
    token, acquired, expires = f.integer(r[2], "token"), f.time(r[3], "acquired_at"), f.time(r[4], "expires_at")
    return LockInfo(
        name=str(r[0]),
        owner=None if r[1] is None else str(r[1]),
        token=token,
        acquired_at=acquired,
        expires_at=expires,
        held=bool(r[5]),
        corrupt=f.report(quarantine.LOCK, r[0]),
    )
