"""Measurement procedures shared by every system, so peers and rota are timed the same way.

Drain (W1, W5): the jobs are enqueued before any worker starts. The clock runs from the
first handler start (recorded by the handler through the probe) to the moment the database
shows every job done, checked by the measuring process as soon as the handlers' count reaches
N (polling every millisecond). Reported:
  rate        N / (all done - first handler start)        the headline figure
  steady_rate jobs 10 %..90 % / their elapsed time         excludes ramp-up and tail
  cold_rate   N / (all done - worker process spawn)        includes interpreter start-up
  settle_ms   all done - last handler end                   buffered completions, poll lag
  worker_us_per_run   user+sys CPU of the worker processes (and their children) per run,
                      from the first observed handler start to all done
  db_us_per_run       the same for the PostgreSQL backends serving the run's database
                      (PostgreSQL only; see bench/cpu.py)

Pickup (W2): a worker is started and warmed up (its first samples are discarded); then one
job at a time is enqueued after a random idle gap (20 ms plus up to one poll period of the
system, so that enqueues fall at random phases of a polling worker), and the latency is the
handler's start stamp minus the time just before the enqueue call (so it includes the enqueue
commit, as a caller would see it).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bench import probe
from bench.core import Ctx, Metrics, latency_metrics
from bench.cpu import CpuMeter, server_of
from bench.procs import Worker, stop_all, wait_for

StartWorkers = Callable[[Path], Sequence[Worker]]
AtEnd = Callable[[Sequence[Worker]], Metrics]


def new_probe(ctx: Ctx, name: str = "probe.bin") -> tuple[Path, probe.ProbeReader]:
    path = ctx.dir / name
    probe.create(path)
    return path, probe.ProbeReader(path)


def _time_at(progress: Sequence[tuple[float, int]], target: float) -> float:
    """Interpolated time at which the done-count passed `target`."""
    prev_t, prev_n = progress[0]
    for t, n in progress:
        if n >= target:
            if n == prev_n:
                return t
            return prev_t + (t - prev_t) * (target - prev_n) / (n - prev_n)
        prev_t, prev_n = t, n
    return progress[-1][0]


def steady_rate(progress: Sequence[tuple[float, int]], jobs: int) -> float:
    lo, hi = 0.1 * jobs, 0.9 * jobs
    elapsed = _time_at(progress, hi) - _time_at(progress, lo)
    return (hi - lo) / elapsed if elapsed > 0 else float("nan")


def drain_timeout(jobs: int, slowest_rate: float = 50.0) -> float:
    return 60.0 + jobs / slowest_rate


def measure_drain(
    ctx: Ctx,
    jobs: int,
    start_workers: StartWorkers,
    confirm: Callable[[], bool],
    timeout: float | None = None,
    probe_name: str = "probe.bin",
    pg_url: str | None = None,
    at_end: AtEnd | None = None,
) -> Metrics:
    """Start the workers on a pre-filled queue and time the drain (see module docstring).

    `pg_url` (the run's database, PostgreSQL or MariaDB) adds the server's CPU for it; `at_end(workers)` adds
    metrics read from the live workers once every job is done (e.g. their peak memory).
    """
    probe_path, reader = new_probe(ctx, probe_name)
    progress: list[tuple[float, int]] = [(time.time(), 0)]
    meter = CpuMeter(server_of(pg_url))
    workers: Sequence[Worker] = ()

    def all_handled() -> bool:
        n = reader.total()
        if n != progress[-1][1]:
            progress.append((time.time(), n))
            if not meter.started:
                meter.start([w.pid for w in workers], n)
        meter.tick()
        return n >= jobs

    t_spawn = time.time()
    workers = start_workers(probe_path)
    try:
        wait_for(all_handled, timeout or drain_timeout(jobs), f"{jobs} handled jobs", workers)
        t_done = wait_for(confirm, 60.0, "the database to show every job done", workers)
        extra = {**meter.stop(jobs), **(at_end(workers) if at_end else {})}
    finally:
        stop_all(workers)
    first, last = reader.first_start(), reader.last_end()
    return {
        **extra,
        "rate": jobs / (t_done - first),
        "steady_rate": steady_rate(progress, jobs),
        "cold_rate": jobs / (t_done - t_spawn),
        "seconds": t_done - first,
        "startup_s": first - t_spawn,
        "settle_ms": max(0.0, t_done - last) * 1000.0,
    }


def measure_pickup(
    ctx: Ctx,
    start_workers: StartWorkers,
    enqueue: Callable[[int], object],
    samples: int,
    warmup: int = 5,
    period: float = 0.05,
) -> Metrics:
    """Enqueue one job at a time to an idle worker; latency = handler start - enqueue call.

    The idle gap before each enqueue is uniform in [20 ms, 20 ms + period]: give a polling
    worker its poll interval as `period` so enqueues land at random phases of its cycle.
    """
    probe_path, reader = new_probe(ctx)
    workers = start_workers(probe_path)
    latencies: list[float] = []
    try:
        for i in range(warmup + samples):
            time.sleep(random.uniform(0.02, 0.02 + period))
            t0 = time.time()
            enqueue(i)
            wait_for(
                lambda i=i: reader.sample(i) > 0,  # type: ignore[misc]
                120.0 if i == 0 else 30.0,
                f"sample {i} to start",
                workers,
                interval=0.0002,
            )
            if i >= warmup:
                latencies.append(reader.sample(i) - t0)
    finally:
        stop_all(workers)
    return latency_metrics(latencies)
