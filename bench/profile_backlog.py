"""Why W5 misses its target on PostgreSQL: the claim's index scan right after a burst.

Builds W5's table (500,000 runs drained through a worker, 500,000 due in 30 days, then
20,000 due now), then shows the claim's candidate scan (EXPLAIN ANALYZE BUFFERS, and the
median time of 50 scans) in three states: right after the burst, after those scans have
marked the dead index entries, and after VACUUM. Run from the bench venv:

    .venv-bench/bin/python -m bench.profile_backlog [--pg-url URL] [--rows 1000000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import psycopg

import rota
from bench.dbs import DEFAULT_PG_URL, scratch_pg
from rota.worker import Worker

DB = "bench_profile_backlog"
CANDIDATES = """
    SELECT id FROM rota_runs
    WHERE status = 'pending' AND NOT held AND due_at <= now()
    ORDER BY priority DESC, due_at, id
    LIMIT 100
    FOR UPDATE SKIP LOCKED
"""


def _enqueue(task: Any, n: int, chunk: int = 10_000) -> None:
    for offset in range(0, n, chunk):
        task.enqueue_many([((), {})] * min(chunk, n - offset))


def _drain(app: rota.App) -> int:
    import asyncio

    worker: Worker = app.worker(concurrency=100, install_signal_handlers=False)
    return asyncio.run(worker.run_until_idle())


def _scan(conn: psycopg.Connection[Any], label: str, repeats: int = 50) -> None:
    """EXPLAIN the first scan, then time `repeats` more (each in a rolled-back transaction)."""
    with conn.transaction(force_rollback=True):
        plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + CANDIDATES).fetchall()
    times = []
    for _ in range(repeats):
        with conn.transaction(force_rollback=True):
            t0 = time.perf_counter()
            conn.execute(CANDIDATES).fetchall()
            times.append((time.perf_counter() - t0) * 1000)
    dead = conn.execute("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'rota_runs'").fetchone()
    print(f"\n### {label}\n")
    print(f"n_dead_tup {dead[0] if dead else '?'}; candidate scan median {statistics.median(times):.2f} ms")
    print(f"over {repeats} scans (min {min(times):.2f}, max {max(times):.2f})\n")
    print("```")
    for (line,) in plan:
        print(line)
    print("```")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL, help="an admin URL (the database is created and dropped)")
    parser.add_argument("--rows", type=int, default=1_000_000, help="backlog rows: half drained, half in the future")
    parser.add_argument("--due", type=int, default=20_000, help="due runs enqueued after the backlog")
    args = parser.parse_args()

    with scratch_pg(args.pg_url, DB) as url:
        app = rota.App(url)

        @app.task(name="noop")
        def noop() -> None:
            return None

        t0 = time.perf_counter()
        _enqueue(noop, args.rows // 2)
        drained = _drain(app)
        _enqueue(noop.options(delay=30 * 86400), args.rows - args.rows // 2)
        _enqueue(noop, args.due)
        print(
            f"# W5 claim profile: {drained:,} drained, {args.rows - args.rows // 2:,} in the future, {args.due:,} due"
        )
        print(f"(setup {time.perf_counter() - t0:.0f} s; PostgreSQL {psycopg.connect(url).info.server_version})")
        with psycopg.connect(url, autocommit=True) as conn:
            _scan(conn, "1. Right after the burst (first scan meets unmarked dead entries)")
            _scan(conn, "2. After those scans (dead entries marked LP_DEAD, still in the index)")
            conn.execute("VACUUM rota_runs")
            _scan(conn, "3. After VACUUM (dead entries removed)")
        app.close()


if __name__ == "__main__":
    main()
