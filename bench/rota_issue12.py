"""rota's workloads added for issue 12: W7 small real job, W8 scale-out, W9 memory.

W7 and W9 run the worker as users do: `python -m rota worker bench.rota_app:app` (the
`rota worker` command; `-c N` only where a system names a concurrency), so "defaults"
means the command's defaults. W8 reuses W1's drain (bench.rota_workloads.drain) with 1, 2
and 4 worker processes on one database.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import procs, small_job
from bench.core import Backend, Ctx, Metrics, System
from bench.cpu import memory_mb
from bench.measure import StartWorkers, measure_drain, new_probe
from bench.probe import ENV_PATH
from bench.rota_workloads import DRAIN_CONCURRENCY, database, enqueue_bulk, load_app_module, nothing_left

APP_SPEC = "bench.rota_app:app"
MEMORY_SETTLE_S = 3.0  # after the worker's first run: a few default poll intervals (1 s)


def cli_workers(ctx: Ctx, url: str, count: int = 1, concurrency: int | None = None) -> StartWorkers:
    """`count` processes of `python -m rota worker bench.rota_app:app [-c N]`."""
    args = ["worker", APP_SPEC] + (["--concurrency", str(concurrency)] if concurrency else [])

    def start(probe_path: Path) -> Sequence[procs.Worker]:
        env = {"ROTA_DATABASE_URL": url, ENV_PATH: str(probe_path)}
        return [
            procs.spawn_module("rota", args, ctx.dir / f"rota-cli-worker-{slot}.log", env, slot)
            for slot in range(count)
        ]

    return start


# --- W7 ----------------------------------------------------------------------------------


def small_job_drain(
    ctx: Ctx, backend: Backend, concurrency: int | None = None, use_async: bool = False, processes: int = 1
) -> Metrics:
    """W7: ctx.real_jobs runs each doing one Redis INCR, `processes` `rota worker` processes."""
    with database(ctx, backend) as url, small_job.counter(ctx, ctx.real_jobs):
        m = load_app_module(url)
        enqueue_bulk(m.incr_async if use_async else m.incr, ctx.real_jobs)
        start = cli_workers(ctx, url, processes, concurrency)
        pg_url = url if backend != "sqlite" else None
        return measure_drain(ctx, ctx.real_jobs, start, nothing_left(m.app), pg_url=pg_url)


# --- W9 ----------------------------------------------------------------------------------


def _idle_worker_memory(ctx: Ctx, url: str, m: Any) -> Metrics:
    """Start a default worker, run one job through it, let it idle, read its memory."""
    probe_path, reader = new_probe(ctx)
    workers = cli_workers(ctx, url)(probe_path)
    try:
        m.stamp.enqueue(0)
        procs.wait_for(lambda: reader.sample(0) > 0, 300.0, "the worker to run its first job", workers)
        time.sleep(MEMORY_SETTLE_S)
        workers[0].check()
        return memory_mb(workers[0].pid)
    finally:
        procs.stop_all(workers)


def memory_idle(ctx: Ctx, backend: Backend, schedules: bool = False) -> Metrics:
    """W9: peak RSS of an idle default worker, with no schedules or ctx.idle_schedules
    (cron once a year, none due: as W4)."""
    with database(ctx, backend) as url:
        m = load_app_module(url)
        started = time.perf_counter()
        for i in range(ctx.idle_schedules if schedules else 0):
            m.app.add_schedule(f"bench.idle.{i}", m.noop, cron="0 0 1 1 *", tz="UTC")
        setup_s = time.perf_counter() - started
        return {**_idle_worker_memory(ctx, url, m), "setup_s": setup_s}


def memory_backlog(ctx: Ctx, backend: Backend) -> Metrics:
    """W9: peak RSS of a default worker at the end of draining ctx.memory_backlog no-op runs
    (VmHWM: the highest resident size over its whole life, the drain included)."""
    with database(ctx, backend) as url:
        m = load_app_module(url)
        started = time.perf_counter()
        enqueue_bulk(m.noop, ctx.memory_backlog)
        setup_s = time.perf_counter() - started
        start = cli_workers(ctx, url)
        pg_url = url if backend != "sqlite" else None
        metrics = measure_drain(
            ctx,
            ctx.memory_backlog,
            start,
            nothing_left(m.app),
            pg_url=pg_url,
            at_end=lambda workers: memory_mb(workers[0].pid),
        )
        return {**metrics, "setup_s": setup_s}


# --- registry ---------------------------------------------------------------------------


def _system(key: str, table: str, label: str, backend: Backend, func: str, settings: str, **params: Any) -> System:
    timeout = 3600.0 if func == "memory_backlog" else 900.0
    return System(
        key=key,
        table=table,
        label=label,
        backend=backend,
        kind="rota",
        func=f"{__name__}:{func}" if ":" not in func else func,
        params={"backend": backend, **params},
        settings=settings,
        max_runs=1 if func == "memory_backlog" else None,
        timeout=timeout,
    )


_BACKENDS: tuple[tuple[Backend, str], ...] = (("postgres", "pg"), ("sqlite", "sqlite"), ("mysql", "mysql"))
_W7: tuple[tuple[str, str, str, dict[str, Any]], ...] = (
    ("default", "rota worker, defaults (concurrency 5)", "rota worker APP", {}),
    ("default-2w", "2 x rota worker, defaults", "2 processes of rota worker APP", {"processes": 2}),
    ("c1", "rota worker -c 1", "rota worker APP --concurrency 1", {"concurrency": 1}),
    ("c100", "rota worker -c 100, def handler", "rota worker APP --concurrency 100", {"concurrency": 100}),
    (
        "c100-async",
        "rota worker -c 100, async def handler",
        "rota worker APP --concurrency 100; handler awaits redis.asyncio",
        {"concurrency": 100, "use_async": True},
    ),
)
_W9: tuple[tuple[str, str, str, str, dict[str, Any]], ...] = (
    ("idle", "idle, no schedules", "memory_idle", "rota worker APP, one run then 3 s idle", {}),
    (
        "schedules",
        "idle, 10,000 schedules",
        "memory_idle",
        "as above with 10,000 schedules (cron once a year)",
        {"schedules": True},
    ),
    ("backlog", "draining the backlog", "memory_backlog", "rota worker APP draining the W9 backlog", {}),
)


def _systems() -> tuple[System, ...]:
    out: list[System] = []
    for backend, short in _BACKENDS:
        for suffix, label, settings, params in _W7:
            out.append(
                _system(f"rota-{short}-w7-{suffix}", "W7.small", label, backend, "small_job_drain", settings, **params)
            )
    for backend, short in _BACKENDS:
        for workers in (1, 2, 4):
            label = f"rota, {workers} worker process{'es' if workers > 1 else ''}"
            settings = f"{workers} x run_worker(concurrency={DRAIN_CONCURRENCY}), no-op jobs (W1)"
            func = "bench.rota_workloads:drain"
            out.append(
                _system(f"rota-{short}-scale-{workers}w", "W8.scale", label, backend, func, settings, workers=workers)
            )
    for backend, short in _BACKENDS:
        for suffix, label, func, settings, params in _W9:
            out.append(_system(f"rota-{short}-memory-{suffix}", "W9.memory", label, backend, func, settings, **params))
    return tuple(out)


ROTA_ISSUE12_SYSTEMS: tuple[System, ...] = _systems()
