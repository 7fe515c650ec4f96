"""The rota application the benchmarks run (written against the public API in DESIGN.md).

The database comes from ROTA_DATABASE_URL. Handlers report to the shared-memory probe
(bench/probe.py) so the measuring process sees handler starts without a database round trip;
they also return their time stamps, which rota stores as the run's JSON result.

Set BENCH_ROTA_TICK=1 (W3) to also register an every-second schedule, BENCH_ROTA_FLOW=1 (W10)
to also register the limited tasks (else the database has no limits and W1 stays as it was).
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

import rota
from bench import small_job
from bench.probe import probe

HOLD_RETRY_OFFSET = 100_000  # probe sample index of a held run's second attempt
TICK_SCHEDULE = "bench.tick"

_url = os.environ.get("ROTA_DATABASE_URL")
app = rota.App(_url) if _url else rota.App()


@app.task(name="bench.noop")
def noop() -> None:
    """W1/W5 drain: a no-op that counts itself."""
    bench_probe = probe()
    if bench_probe is not None:
        bench_probe.job_done()


@app.task(name="bench.noop_async")
async def noop_async() -> None:
    """W1 drain with a handler run on the worker's event loop."""
    bench_probe = probe()
    if bench_probe is not None:
        bench_probe.job_done()


@app.task(name="bench.incr")
def incr() -> None:
    """W7: the small real job (one Redis INCR), then count."""
    small_job.incr()
    bench_probe = probe()
    if bench_probe is not None:
        bench_probe.job_done()


@app.task(name="bench.incr_async")
async def incr_async() -> None:
    """W7 with an async def handler (redis.asyncio on the worker's loop)."""
    await small_job.incr_async()
    bench_probe = probe()
    if bench_probe is not None:
        bench_probe.job_done()


@app.task(name="bench.stamp")
def stamp(i: int) -> float:
    """W2 pickup: records when sample `i` started."""
    now = time.time()
    bench_probe = probe()
    if bench_probe is not None:
        bench_probe.mark(i, now)
    return now


@app.task(name="bench.hold", retries=1, timeout=3600)
def hold(i: int, seconds: float) -> float:
    """W6 rescue: the first attempt blocks (its worker gets killed); the retry returns."""
    now = time.time()
    bench_probe = probe()
    first = bench_probe.mark_once(i, HOLD_RETRY_OFFSET + i) if bench_probe else True
    if first:
        time.sleep(seconds)
    return now


@app.task(name="bench.due", pass_context=True)
def due(ctx: rota.RunContext) -> float:
    """W3 delayed: handler start minus the run's due time (scheduled_for), in seconds."""
    lateness = time.time() - ctx.scheduled_for.timestamp()
    bench_probe = probe()
    if bench_probe is not None:
        bench_probe.append(lateness)
    return lateness


if os.environ.get("BENCH_ROTA_TICK") == "1":

    @app.schedule(every=timedelta(seconds=1), name=TICK_SCHEDULE, pass_context=True)
    def tick(ctx: rota.RunContext) -> float:
        """W3 lateness: handler start minus the tick's scheduled time, in seconds."""
        lateness = time.time() - ctx.scheduled_for.timestamp()
        bench_probe = probe()
        if bench_probe is not None:
            bench_probe.append(lateness)
        return lateness


if os.environ.get("BENCH_ROTA_FLOW") == "1":

    @app.task(name="bench.noop_limited", limit=100)
    def noop_limited() -> None:
        """W1 drain under a concurrency limit of 100 (issue 20): a no-op that counts itself."""
        bench_probe = probe()
        if bench_probe is not None:
            bench_probe.job_done()

    @app.task(name="bench.noop_keyed", limit=rota.Limit(1, by="key"))
    def noop_keyed(key: int) -> None:
        """W1 drain with at most one run per key at once, over many keys (issue 20)."""
        bench_probe = probe()
        if bench_probe is not None:
            bench_probe.job_done()
