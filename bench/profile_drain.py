"""Where a PostgreSQL drain spends its CPU: the worker's Python (py-spy) and the server's.

Enqueues N no-op runs (`--task incr`: W7's Redis INCR job), starts one `bench.rota_worker`
(concurrency 100 as W1, or `--concurrency`: 5 is W7's defaults) under
`py-spy record --gil`, waits until every run has finished, and prints: the drain rate, CPU
per run in the worker and in PostgreSQL's processes, and the functions holding the GIL most
(self and inclusive). Needs py-spy (`pip install py-spy`, not a bench requirement: it is
only for this profile). Run from the bench venv:

    .venv-bench/bin/python -m bench.profile_drain [--pg-url URL] [--runs 200000] [--task incr --concurrency 5]
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import psycopg

from bench.dbs import DEFAULT_PG_URL, scratch_pg

DB = "bench_profile_drain"


def _postgres_cpu() -> float:
    total = 0.0
    for proc in psutil.process_iter(["name", "cpu_times"]):
        if proc.info["name"] == "postgres" and proc.info["cpu_times"] is not None:
            total += proc.info["cpu_times"].user + proc.info["cpu_times"].system
    return total


def _transactions(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    """Transactions committed or rolled back in this database so far (pg_stat_database)."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    return int(row[0]) if row else 0


def _main_thread_cpu(pid: int) -> float:
    """CPU seconds of the process's main thread (the worker's event loop), from /proc."""
    fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _tree_cpu(proc: psutil.Process) -> tuple[float, float]:
    """User and system CPU seconds of the worker's Python processes."""
    user = system = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            if p.name().startswith("python"):
                times = p.cpu_times()
                user, system = user + times.user, system + times.system
        except psutil.NoSuchProcess:
            pass
    return user, system


def _summarise(raw: Path, top: int) -> None:
    """Collapsed stacks ("frame;frame;... count") -> self and inclusive shares per function."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if not f.startswith("process ") and not f.startswith("thread ")]
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    print(f"\n{total:,} samples holding the GIL.\n")
    for title, counter in (("self", own), ("inclusive", inclusive)):
        print(f"| {title} % | function (file) |\n|--:|---|")
        for frame, count in counter.most_common(top):
            print(f"| {100.0 * count / total:.1f} | `{frame}` |")
        print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL, help="an admin URL (the database is created and dropped)")
    parser.add_argument("--runs", type=int, default=200_000)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--no-spy", action="store_true", help="no py-spy: the rate and CPU per run unperturbed")
    parser.add_argument(
        "--task",
        choices=["noop", "incr", "incr_async"],
        default="noop",
        help="incr: W7's Redis INCR job (incr_async: with redis.asyncio)",
    )
    parser.add_argument("--concurrency", type=int, default=100, help="the worker's (W7 defaults: 5)")
    args = parser.parse_args()
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not args.no_spy and not Path(pyspy).exists():
        sys.exit("py-spy is not installed: pip install py-spy (or --no-spy)")

    out = Path(tempfile.mkdtemp()) / "drain.txt"
    with scratch_pg(args.pg_url, DB) as url:
        os.environ["ROTA_DATABASE_URL"] = url
        from bench import rota_app

        app, task = rota_app.app, getattr(rota_app, args.task)
        os.environ.setdefault("BENCH_REDIS_KEY", f"bench:w7:profile:{os.getpid()}")
        for offset in range(0, args.runs, 10_000):
            task.enqueue_many([((), {})] * min(10_000, args.runs - offset))
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE rota_runs")
            cmd = [] if args.no_spy else [pyspy, "record", "--gil", "--nonblocking", "--nolineno", "-r", "200"]
            cmd += [] if args.no_spy else ["-f", "raw", "-o", str(out), "--"]
            cmd += [sys.executable, "-m", "bench.rota_worker", "bench.rota_app", "--concurrency", str(args.concurrency)]
            env = {**os.environ, "ROTA_DATABASE_URL": url}
            pg0, xacts0 = _postgres_cpu(), _transactions(conn)
            started = time.perf_counter()
            spy = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            proc = psutil.Process(spy.pid)
            worker_cpu = (0.0, 0.0)
            while True:
                worker_cpu = max(worker_cpu, _tree_cpu(proc), key=sum)
                if spy.poll() is not None:
                    sys.exit(f"the worker exited with {spy.returncode}: run {' '.join(cmd)} to see why")
                left = conn.execute(
                    "SELECT EXISTS (SELECT 1 FROM rota_runs WHERE status IN ('pending', 'running'))"
                ).fetchone()
                if left is not None and not left[0]:
                    break
                time.sleep(0.1)
            elapsed = time.perf_counter() - started
            pg_cpu, loop_cpu = _postgres_cpu() - pg0, _main_thread_cpu(proc.pid)
            time.sleep(1.0)  # (backends report their transactions within a second)
            xacts = _transactions(conn) - xacts0
            for child in [proc, *proc.children(recursive=True)]:
                if child.name().startswith("python"):
                    child.send_signal(signal.SIGTERM)
            spy.wait(timeout=60)
        print(
            f"# Drain profile: {args.runs:,} {args.task} runs, one worker (concurrency {args.concurrency}), PostgreSQL"
        )
        how = "without a profiler" if args.no_spy else "under py-spy (which slows the worker)"
        print(f"\nWall {elapsed:.1f} s including worker start-up: {args.runs / elapsed:,.0f} runs/s {how}.")
        print(
            f"CPU per run: worker {1e6 * sum(worker_cpu) / args.runs:.0f} µs"
            f" ({1e6 * worker_cpu[0] / args.runs:.0f} user, {1e6 * worker_cpu[1] / args.runs:.0f} system),"
            f" PostgreSQL {1e6 * pg_cpu / args.runs:.0f} µs; the worker's event loop thread {1e6 * loop_cpu / args.runs:.0f} µs"
        )
        print("(the PostgreSQL figure includes this script's polling and background processes).")
        print(f"Transactions per run: {xacts / args.runs:.3f} (this script's polls included).")
        if not args.no_spy:
            _summarise(out, args.top)
        app.close()


if __name__ == "__main__":
    main()
