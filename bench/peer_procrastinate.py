"""Procrastinate on PostgreSQL (psycopg 3 connector).

Schema: `schema_manager.apply_schema_async()`. Jobs: `Task.batch_defer_async` (one bulk
insert). Worker: `App.run_worker_async(concurrency=..., wait=False)`, which returns once no
job is left; `async def` task; LISTEN/NOTIFY on (the default), polling every 5 s (default).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import procs
from bench.core import Ctx, Metrics
from bench.dbs import PgProbe, fresh_pg
from bench.measure import measure_drain
from bench.probe import probe

TASK = "bench_noop"


def make_app(url: str) -> Any:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name=TASK)
    async def noop() -> None:
        bench_probe = probe()
        if bench_probe is not None:
            bench_probe.job_done()

    return app


async def _setup(url: str, jobs: int) -> None:
    app = make_app(url)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        task = app.tasks[TASK]
        for offset in range(0, jobs, 5000):
            await task.batch_defer_async(*({} for _ in range(min(5000, jobs - offset))))


async def _worker(url: str, concurrency: int) -> None:
    app = make_app(url)
    async with app.open_async():
        await app.run_worker_async(concurrency=concurrency, wait=False)


def worker(url: str, concurrency: int) -> None:
    """Worker process body (run through `python -m bench.child worker`)."""
    asyncio.run(_worker(url, concurrency))


def drain(ctx: Ctx, concurrency: int = 1) -> Metrics:
    with fresh_pg(ctx) as url:
        asyncio.run(_setup(url, ctx.jobs))
        check = PgProbe(url)

        def start(probe_path: Path) -> Sequence[procs.Worker]:
            kwargs = {"url": url, "concurrency": concurrency}
            log = ctx.dir / "procrastinate-worker.log"
            return [procs.spawn_function(f"{__name__}:worker", kwargs, log, probe_path)]

        query = "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
        try:
            return measure_drain(ctx, ctx.jobs, start, confirm=lambda: check.scalar(query) == 0)
        finally:
            check.close()
