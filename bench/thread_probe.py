"""What CPython's threads cost W7's job, with no scheduler at all: one Redis INCR per call.

Runs N INCRs (the same call as bench/small_job.py, on one key deleted afterwards) in three
ways, side by side, `--rounds` times, and prints calls per second and the process's user and
system CPU per call:

- inline: one thread, a plain loop (the raw loops' way, bench `raw-*-w7`);
- plain threads: K threads, each a plain loop over its share (no coordination at all);
- asyncio + pool: an event loop keeps `--inflight` calls (W7's default concurrency, 5) in
  flight on a ThreadPoolExecutor of K threads (`loop.run_in_executor`), the plainest way an
  asyncio program runs blocking handlers.

It bounds what a worker that runs `def` handlers on threads from an event loop can reach on
this machine (rota's worker does that, and claims, finishes and renews leases besides):

    .venv-bench/bin/python -m bench.thread_probe [--calls 20000] [--rounds 2] [--inflight 5]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import resource
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import redis

from bench.small_job import redis_url


def _cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def _timed(name: str, n: int, body: Callable[[], None]) -> None:
    t0, (u0, s0) = time.perf_counter(), _cpu()
    body()
    wall, (u1, s1) = time.perf_counter() - t0, _cpu()
    print(f"| {name} | {n / wall:,.0f} | {1e6 * (u1 - u0) / n:.0f} | {1e6 * (s1 - s0) / n:.0f} |")


def _threads(incr: Callable[[], object], n: int, k: int) -> None:
    """k threads, each a plain loop over its share (k = 1: the inline loop, on a thread)."""

    def share() -> None:
        for _ in range(n // k):
            incr()

    threads = [threading.Thread(target=share) for _ in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


async def _pooled(incr: Callable[[], object], n: int, k: int, inflight: int) -> None:
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(inflight)

    async def one() -> None:
        async with gate:
            await loop.run_in_executor(pool, incr)

    with ThreadPoolExecutor(k) as pool:
        await asyncio.gather(*(one() for _ in range(n)))


def _run_pooled(incr: Callable[[], object], n: int, k: int, inflight: int) -> None:
    asyncio.run(_pooled(incr, n, k, inflight))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--inflight", type=int, default=5, help="calls in flight on the pool (W7: 5)")
    args = parser.parse_args()
    client = redis.Redis.from_url(redis_url())
    key = f"bench:thread_probe:{uuid.uuid4().hex}"

    def incr() -> object:
        return client.incr(key)

    n = args.calls
    print("| way | calls/s | user µs/call | system µs/call |\n|---|--:|--:|--:|")
    try:
        for _ in range(args.rounds):
            _timed("inline", n, functools.partial(_threads, incr, n, 1))
            for k in (2, 3, 5):
                _timed(f"plain threads, {k}", n - n % k, functools.partial(_threads, incr, n, k))
            for k in (1, 2, 3, 5):
                label = f"asyncio + pool of {k}, {args.inflight} in flight"
                _timed(label, n, functools.partial(_run_pooled, incr, n, k, args.inflight))
    finally:
        client.delete(key)


if __name__ == "__main__":
    main()
