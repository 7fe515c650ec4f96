"""huey on SQLite (`SqliteHuey`, WAL, fsync=True: `PRAGMA synchronous=FULL`).

Jobs: one task call per job (huey has no bulk enqueue). For the drain set-up only, the
producer opens the file with fsync off to fill the queue quickly; the consumer under test
uses fsync=True. Consumer: `huey.create_consumer(workers=1, worker_type="thread",
periodic=False, ...)`, one worker thread; it polls the table (no wake-up on enqueue):
`initial_delay` is its polling interval and `max_delay` caps the back-off while idle.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import procs, small_job
from bench.core import Ctx, Metrics
from bench.dbs import fresh_sqlite, sqlite_scalar
from bench.measure import StartWorkers, measure_drain, measure_pickup
from bench.probe import probe


def make_huey(path: str, fsync: bool) -> tuple[Any, Any, Any, Any]:
    """The huey instance and its tasks (defined the same way in producer and consumer)."""
    from huey import SqliteHuey

    huey = SqliteHuey(name="bench", filename=path, fsync=fsync)

    @huey.task(name="noop")
    def noop() -> None:
        bench_probe = probe()
        if bench_probe is not None:
            bench_probe.job_done()

    @huey.task(name="stamp")
    def stamp(i: int) -> None:
        bench_probe = probe()
        if bench_probe is not None:
            bench_probe.mark(i)

    @huey.task(name="incr")
    def incr() -> None:
        small_job.incr()
        bench_probe = probe()
        if bench_probe is not None:
            bench_probe.job_done()

    return huey, noop, stamp, incr


def worker(path: str, initial_delay: float, max_delay: float) -> None:
    """Consumer process body (run through `python -m bench.child worker`)."""
    huey, _, _, _ = make_huey(path, fsync=True)
    consumer = huey.create_consumer(
        workers=1,
        worker_type="thread",
        periodic=False,
        initial_delay=initial_delay,
        max_delay=max_delay,
    )
    consumer.run()


def _start(ctx: Ctx, path: Path, initial_delay: float, max_delay: float) -> StartWorkers:
    def start(probe_path: Path) -> Sequence[procs.Worker]:
        kwargs = {"path": str(path), "initial_delay": initial_delay, "max_delay": max_delay}
        log = ctx.dir / "huey-worker.log"
        return [procs.spawn_function(f"{__name__}:worker", kwargs, log, probe_path)]

    return start


def drain(ctx: Ctx, initial_delay: float = 0.1, max_delay: float = 10.0) -> Metrics:
    path = fresh_sqlite(ctx, "huey.db")
    _, noop, _, _ = make_huey(str(path), fsync=False)
    for _ in range(ctx.jobs):
        noop()
    return measure_drain(
        ctx,
        ctx.jobs,
        _start(ctx, path, initial_delay, max_delay),
        confirm=lambda: sqlite_scalar(path, "SELECT count(*) FROM task") == 0,
    )


def drain_incr(ctx: Ctx, initial_delay: float = 0.1, max_delay: float = 10.0) -> Metrics:
    """W7: ctx.real_jobs jobs doing one Redis INCR each; consumer with huey's defaults
    (1 worker thread, fsync as SqliteHuey(fsync=True) above, polling 0.1 s backing off to 10 s)."""
    path = fresh_sqlite(ctx, "huey.db")
    _, _, _, incr = make_huey(str(path), fsync=False)
    with small_job.counter(ctx, ctx.real_jobs):
        for _ in range(ctx.real_jobs):
            incr()
        return measure_drain(
            ctx,
            ctx.real_jobs,
            _start(ctx, path, initial_delay, max_delay),
            confirm=lambda: sqlite_scalar(path, "SELECT count(*) FROM task") == 0,
        )


def enqueue_single(ctx: Ctx) -> Metrics:
    path = fresh_sqlite(ctx, "huey.db")
    _, noop, _, _ = make_huey(str(path), fsync=True)
    noop()  # creates the tables and the connection outside the timing
    start = time.perf_counter()
    for _ in range(ctx.enqueue_single):
        noop()
    seconds = time.perf_counter() - start
    return {"rate": ctx.enqueue_single / seconds, "seconds": seconds}


def pickup(ctx: Ctx, initial_delay: float = 0.1, max_delay: float = 0.1) -> Metrics:
    path = fresh_sqlite(ctx, "huey.db")
    _, _, stamp, _ = make_huey(str(path), fsync=True)
    start = _start(ctx, path, initial_delay, max_delay)
    return measure_pickup(ctx, start, lambda i: stamp(i), ctx.samples, period=max_delay)
