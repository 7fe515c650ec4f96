"""PgQueuer on PostgreSQL (asyncpg driver, uvloop, as its `pgq run` CLI does).

Schema: `Queries.install()` (durable tables, the default). Jobs: one bulk `Queries.enqueue`
call with lists. Worker: `PgQueuer(AsyncpgDriver(conn)).run(batch_size=..., mode=...)` with
`async def` entrypoints; drain runs use `QueueExecutionMode.drain`, pickup runs the default
continuous mode (LISTEN/NOTIFY wake-ups).
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench import procs, small_job
from bench.core import Ctx, Metrics
from bench.dbs import PgProbe, fresh_pg
from bench.measure import StartWorkers, measure_drain, measure_pickup
from bench.probe import probe

ENTRY_NOOP = "noop"
ENTRY_STAMP = "stamp"
ENTRY_INCR = "incr"


async def _queries(url: str) -> Any:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    return Queries(AsyncpgDriver(await asyncpg.connect(url)))


async def _install(url: str) -> None:
    queries = await _queries(url)
    await queries.install()


async def _enqueue_bulk(url: str, jobs: int, chunk: int, entry: str = ENTRY_NOOP) -> float:
    """Enqueue `jobs` jobs of `entry` in `chunk`-sized bulk calls; returns the seconds taken."""
    queries = await _queries(url)
    start = time.perf_counter()
    for offset in range(0, jobs, chunk):
        n = min(chunk, jobs - offset)
        await queries.enqueue([entry] * n, [None] * n, [0] * n)
    return time.perf_counter() - start


async def _worker(url: str, batch_size: int, drain: bool) -> None:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Job, PgQueuer
    from pgqueuer.types import QueueExecutionMode

    pgq = PgQueuer(AsyncpgDriver(await asyncpg.connect(url)))
    bench_probe = probe()
    assert bench_probe is not None

    @pgq.entrypoint(ENTRY_NOOP)
    async def noop(job: Job) -> None:
        bench_probe.job_done()

    @pgq.entrypoint(ENTRY_INCR)
    async def incr(job: Job) -> None:
        await small_job.incr_async()
        bench_probe.job_done()

    @pgq.entrypoint(ENTRY_STAMP)
    async def stamp(job: Job) -> None:
        bench_probe.mark(int(job.payload or b"0"))

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, pgq.shutdown.set)
    mode = QueueExecutionMode.drain if drain else QueueExecutionMode.continuous
    await pgq.run(batch_size=batch_size, mode=mode, dequeue_timeout=timedelta(seconds=30))


def worker(url: str, batch_size: int, drain: bool) -> None:
    """Worker process body (run through `python -m bench.child worker`)."""
    import uvloop

    uvloop.run(_worker(url, batch_size, drain))


def _start(url: str, batch_size: int, drain: bool, ctx: Ctx) -> StartWorkers:
    def start(probe_path: Path) -> Sequence[procs.Worker]:
        kwargs = {"url": url, "batch_size": batch_size, "drain": drain}
        log = ctx.dir / "pgqueuer-worker.log"
        return [procs.spawn_function(f"{__name__}:worker", kwargs, log, probe_path)]

    return start


def drain(ctx: Ctx, batch_size: int = 10) -> Metrics:
    with fresh_pg(ctx) as url:
        asyncio.run(_install(url))
        asyncio.run(_enqueue_bulk(url, ctx.jobs, ctx.jobs))
        check = PgProbe(url)
        try:
            return measure_drain(
                ctx,
                ctx.jobs,
                _start(url, batch_size, drain=True, ctx=ctx),
                confirm=lambda: check.scalar("SELECT count(*) FROM pgqueuer") == 0,
                pg_url=url,
            )
        finally:
            check.close()


def drain_incr(ctx: Ctx) -> Metrics:
    """W7: ctx.real_jobs jobs doing one Redis INCR each; PgQueuer.run() with its defaults
    (batch_size=10, continuous mode), an `async def` entrypoint using redis.asyncio."""
    with fresh_pg(ctx) as url, small_job.counter(ctx, ctx.real_jobs):
        asyncio.run(_install(url))
        asyncio.run(_enqueue_bulk(url, ctx.real_jobs, ctx.real_jobs, ENTRY_INCR))
        check = PgProbe(url)
        try:
            return measure_drain(
                ctx,
                ctx.real_jobs,
                _start(url, 10, drain=False, ctx=ctx),
                confirm=lambda: check.scalar("SELECT count(*) FROM pgqueuer") == 0,
                pg_url=url,
            )
        finally:
            check.close()


def enqueue_bulk(ctx: Ctx, chunk: int = 1000) -> Metrics:
    with fresh_pg(ctx) as url:
        asyncio.run(_install(url))
        seconds = asyncio.run(_enqueue_bulk(url, ctx.jobs, chunk))
    return {"rate": ctx.jobs / seconds, "seconds": seconds}


def pickup(ctx: Ctx, batch_size: int = 10) -> Metrics:
    with fresh_pg(ctx) as url:
        asyncio.run(_install(url))
        loop = asyncio.new_event_loop()
        try:
            queries = loop.run_until_complete(_queries(url))

            def enqueue(i: int) -> None:
                loop.run_until_complete(queries.enqueue(ENTRY_STAMP, str(i).encode()))

            start = _start(url, batch_size, drain=False, ctx=ctx)
            return measure_pickup(ctx, start, enqueue, ctx.samples)
        finally:
            loop.close()
