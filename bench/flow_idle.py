"""W12 idle under a rate (issue 20): the CPU of an idle worker while 10,000 runs wait on a rate
of 1 start a minute, against the same worker on a database with nothing to do.

    python -m bench.flow_idle [--waiting 10000] [--seconds 30] [--runs 3] [--pg-url URL]

Each run, per store: a fresh database (a `bench_flow_idle` PostgreSQL database, dropped
afterwards, or a new SQLite file); `rota worker` (one process, its defaults: concurrency 5,
poll interval 1 s) of an app with one task rated `Rate(1, per=60)`; with `--waiting` runs of
it enqueued (one starts, the rest wait for the window), or none (the baseline). After a
settling time (the first run started, the waiting ones pushed to the window's opening), the
worker process's CPU (user + system, /proc) over `--seconds`, as a percentage of one core.
The target: under 1 % with the runs waiting. Reported: median and min-max over the runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import psutil

import rota
from bench.dbs import DEFAULT_PG_URL, scratch_store

APP = "bench.flow_idle_app:app"
SETTLE = 5.0  # seconds after the first start: the waiting runs' due time has moved on


def one_run(url: str, waiting: int, seconds: float) -> float:
    """The worker's CPU over `seconds`, in % of a core, with `waiting` rated runs enqueued."""
    os.environ["ROTA_DATABASE_URL"] = url  # for the worker's app module
    from bench.flow_idle_app import declare

    client = rota.App(url, retention=None)
    task = declare(client)
    client.migrate()
    client.prepare()
    if waiting:
        task.enqueue_many([((n,), {}) for n in range(waiting)])
    cmd = [sys.executable, "-m", "rota", "worker", APP]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not client.list_workers():
            time.sleep(0.2)
        if waiting:
            while time.monotonic() < deadline and not client.list_runs(status="succeeded", limit=1):
                time.sleep(0.2)
        time.sleep(SETTLE)
        watched = psutil.Process(proc.pid)
        before = sum(watched.cpu_times()[:2])
        time.sleep(seconds)
        used = sum(watched.cpu_times()[:2]) - before
        assert proc.poll() is None, "the worker exited"
        if waiting:
            assert len(client.list_runs(status="succeeded", limit=10)) == 1, "more than one start in the window"
    finally:
        proc.terminate()
        proc.wait(30)
        client.close()
    return 100.0 * used / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waiting", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--only", choices=("postgres", "sqlite"), default=None)
    args = parser.parse_args()
    backends = [args.only] if args.only else ["postgres", "sqlite"]
    cases = [(b, n) for b in backends for n in (args.waiting, 0)]
    cpu: dict[tuple[str, int], list[float]] = {case: [] for case in cases}
    started = time.monotonic()
    for _ in range(args.runs):  # interleaved: run 1 of each case, then run 2, ...
        for backend, waiting in cases:
            with scratch_store(backend, args.pg_url, "bench_flow_idle") as url:
                cpu[(backend, waiting)].append(one_run(url, waiting, args.seconds))
    print(f"W12 idle under a rate: one `rota worker` (defaults), CPU over {args.seconds:.0f} s, {args.runs} runs")
    print("| store | runs waiting on Rate(1, per=60) | worker CPU, % of a core (median) | min-max | target |")
    print("|---|--:|--:|--:|---|")
    for (backend, waiting), values in cpu.items():
        median = statistics.median(values)
        target = ("met" if median < 1.0 else "**missed**") if waiting else "(baseline: nothing to do)"
        print(f"| {backend} | {waiting:,} | {median:.2f} | {min(values):.2f}-{max(values):.2f} | {target} |")
    print(f"wall time {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
