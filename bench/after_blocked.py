"""W7 right after a blocked phase: does the `def` handlers' pool come back down?

Enqueues `--blocked` runs of `bench.hold` (each sleeps `--seconds`; they grow the pool to a
thread per slot) and then N of W7's Redis INCR job on a scratch PostgreSQL database, starts
one `bench.rota_worker` with W7's defaults (concurrency 5), waits until every run is final
and prints the INCR phase's rate (first INCR run's start to the last one's finish, from the
database). Run it from each checkout to compare versions (`-m` imports rota from the
current directory):

    .venv-bench/bin/python -m bench.after_blocked [--runs 30000] [--blocked 5] [--seconds 0.3]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

import psycopg

from bench.dbs import DEFAULT_PG_URL, scratch_pg

DB = "bench_after_blocked"


def _wait_final(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    query = "SELECT EXISTS (SELECT 1 FROM rota_runs WHERE status IN ('pending', 'running'))"
    while True:
        row = conn.execute(query).fetchone()
        if row is not None and not row[0]:
            return
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL, help="an admin URL (the database is created and dropped)")
    parser.add_argument("--runs", type=int, default=30_000)
    parser.add_argument("--blocked", type=int, default=5, help="runs that sleep first (W7's 5 slots)")
    parser.add_argument("--seconds", type=float, default=0.3)
    args = parser.parse_args()
    with scratch_pg(args.pg_url, DB) as url:
        os.environ["ROTA_DATABASE_URL"] = url
        os.environ.setdefault("BENCH_REDIS_KEY", f"bench:w7:after-blocked:{os.getpid()}")
        from bench import rota_app

        for i in range(args.blocked):
            rota_app.hold.enqueue(i, args.seconds)
        for offset in range(0, args.runs, 10_000):
            rota_app.incr.enqueue_many([((), {})] * min(10_000, args.runs - offset))
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE rota_runs")
            cmd = [sys.executable, "-m", "bench.rota_worker", "bench.rota_app", "--concurrency", "5"]
            worker = subprocess.Popen(cmd, env={**os.environ, "ROTA_DATABASE_URL": url})
            try:
                _wait_final(conn)
            finally:
                worker.send_signal(signal.SIGTERM)
                worker.wait(timeout=60)
            row = conn.execute(
                "SELECT min(started_at), max(finished_at), count(*) FROM rota_runs_all WHERE task = 'bench.incr'"
            ).fetchone()
        assert row is not None
        first, last, count = row
        print(f"{count:,} INCR runs after {args.blocked} blocked: {count / (last - first).total_seconds():,.0f} runs/s")
        rota_app.app.close()


if __name__ == "__main__":
    main()
