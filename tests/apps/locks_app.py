"""A worker app whose task takes a named lock and keeps it (tests/test_locks.py).

The database comes from ROTA_DATABASE_URL and the lock backend from ROTA_LOCKS_URL. The lease
is kept in HELD (and renewed) after the run ends, so only the worker's shutdown releases it.
"""

from __future__ import annotations

import os

import rota

app = rota.App(
    poll_interval=float(os.environ.get("ROTA_TEST_POLL", "0.05")),
    lease=float(os.environ.get("ROTA_TEST_LEASE", "3")),
    retention=None,
)

HELD: list[rota.Lease] = []


@app.task(name="locks.take")
def take(name: str, ttl: float) -> dict[str, object]:
    lease = app.try_lock(name, ttl=ttl)
    if lease is None:
        raise RuntimeError(f"lock {name!r} is already held")
    HELD.append(lease)
    return {"owner": lease.owner, "token": lease.token, "pid": os.getpid()}
