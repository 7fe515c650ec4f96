"""The registry of rota's workloads W1-W6 (bench/rota_workloads.py): one system per
workload and backend, keyed rota-pg-*, rota-sqlite-* and rota-mysql-* (issue 42: MySQL and
MariaDB through the same functions and the same worker)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from bench.core import Backend, System
from bench.rota_workloads import DELAYED_POLL_INTERVAL, DELAYED_SPACING, DRAIN_CONCURRENCY, ENQUEUE_CHUNK, LONG_RUNS


def _system(key: str, table: str, label: str, backend: Backend, func: str, settings: str = "", **params: Any) -> System:
    timeout = 3600.0 if table == "W5.backlog" else 900.0
    return System(
        max_runs=LONG_RUNS.get(table),
        key=key,
        table=table,
        label=label,
        backend=backend,
        kind="rota",
        func=f"bench.rota_workloads:{func}",
        params={"backend": backend, **params},
        settings=settings,
        timeout=timeout,
    )


_C = f"concurrency={DRAIN_CONCURRENCY}"
# key suffix, table, label, function, settings, params (the same for both backends)
_SPECS: tuple[tuple[str, str, str, str, str, dict[str, Any]], ...] = (
    ("drain-1w", "W1.drain", "rota, 1 worker", "drain", f"run_worker({_C})", {"workers": 1}),
    ("drain-2w", "W1.drain", "rota, 2 workers", "drain", f"2 x run_worker({_C})", {"workers": 2}),
    ("enqueue-single", "W1.enqueue", "rota task.enqueue", "enqueue", "", {"bulk": False}),
    (
        "enqueue-bulk",
        "W1.enqueue",
        "rota task.enqueue_many",
        "enqueue",
        f"chunks of {ENQUEUE_CHUNK:,}",
        {"bulk": True},
    ),
    ("pickup", "W2.pickup", "rota", "pickup", "run_worker() defaults", {}),
    ("pickup-2w", "W2.pickup", "rota, 2 workers", "pickup", "2 x run_worker() defaults", {"workers": 2}),
    ("lateness", "W3.lateness", "rota", "lateness", "every=1s, first 2 ticks dropped", {}),
    ("lateness-2w", "W3.lateness", "rota, 2 workers", "lateness", "as above, 2 x run_worker()", {"processes": 2}),
    (
        "delayed",
        "W3.delayed",
        "rota",
        "delayed",
        f"delay 0.5-8 s, one enqueue per {DELAYED_SPACING} s, poll_interval={DELAYED_POLL_INTERVAL:g}",
        {},
    ),
    ("idle", "W4.idle", "rota", "idle", "app.add_schedule(cron='0 0 1 1 *') each", {}),
    ("backlog", "W5.backlog", "rota", "backlog", "half succeeded, half due in 30 days", {}),
    (
        "backlog-vacuumed",
        "W5.backlog",
        "rota, table vacuumed first",
        "backlog",
        "as above, then VACUUM ANALYZE (PostgreSQL) before the measured drain",
        {"vacuum": True},
    ),
    ("rescue", "W6.rescue", "rota", "rescue", "4 held runs, retries=1, default lease", {}),
)
_BACKENDS: tuple[tuple[Backend, str], ...] = (("postgres", "pg"), ("sqlite", "sqlite"), ("mysql", "mysql"))
# a polling worker needs enqueues spread over its poll interval (see measure_pickup); MySQL's
# idle workers look at the store's data_version every 20-50 ms
_PICKUP_PERIOD: dict[Backend, float] = {"postgres": 0.05, "sqlite": 0.25, "mysql": 0.05}


def _per_backend() -> Iterator[System]:
    for backend, short in _BACKENDS:
        for suffix, table, label, func, settings, params in _SPECS:
            if params.get("vacuum") and backend != "postgres":
                continue  # SQLite has no VACUUM debt to pay: deleted space is reused at once
            extra = {"period": _PICKUP_PERIOD[backend]} if func == "pickup" else {}
            key = f"rota-{short}-{suffix}"
            yield _system(key, table, label, backend, func, settings, **params, **extra)
    yield _system(
        "rota-pg-drain-async",
        "W1.drain",
        "rota, 1 worker, async def handler",
        "postgres",
        "drain",
        f"run_worker_async({_C})",
        workers=1,
        use_async=True,
    )


ROTA_SYSTEMS: tuple[System, ...] = tuple(_per_backend())
