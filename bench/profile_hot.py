"""PostgreSQL's own cost of a claim and a finish, without a worker in the way.

Enqueues N no-op runs (plus, with --backlog, finished and future rows first), then claims
100 and finishes them as succeeded through the store until none is left, from this one
process. Prints the server's CPU per run (the backends serving the database, by process
title), WAL bytes per run (the whole server's), and the runs table's index sizes. With
--explain K, first K batches run under EXPLAIN (ANALYZE, WAL, BUFFERS): WAL records, WAL
bytes and buffers per claim and finish, which other databases' load does not blur. With
--perf, `perf record`s the backend while it claims and finishes and prints its top symbols.
Run from the bench venv:

    .venv-bench/bin/python -m bench.profile_hot [--pg-url URL] [--runs 50000] [--explain 20] [--batch 100] [--perf]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from typing import Any

import psycopg

import rota
from bench.cpu import cpu_of, db_backends
from bench.dbs import DEFAULT_PG_URL, scratch_pg
from rota.stores.base import Outcome

DB = "bench_profile_hot"
BATCH = 100


def _enqueue(task: Any, n: int, chunk: int = 10_000) -> None:
    for offset in range(0, n, chunk):
        task.enqueue_many([((), {})] * min(chunk, n - offset))


def _drain(store: Any, batch: int = BATCH) -> int:
    done = 0
    while True:
        claimed = store.claim("profile", batch, None, 30.0)
        if not claimed:
            return done
        done += len(store.finish([Outcome(c.id, c.token, "succeeded", "null") for c in claimed]))


def _wal(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    return int(row[0]) if row else 0


def _indexes(conn: psycopg.Connection[Any]) -> None:
    rows = conn.execute(
        "SELECT indexrelname, pg_relation_size(indexrelid) FROM pg_stat_user_indexes"
        " WHERE relname LIKE 'rota_run%%' ORDER BY 1"
    ).fetchall()
    for name, size in rows:
        print(f"  {name:32} {size / 8192:8.0f} pages")


def _perf(pids: list[int], seconds: float) -> subprocess.Popen[bytes]:
    cmd = ["perf", "record", "-g", "-o", "/tmp/profile_hot.perf", "-p", ",".join(map(str, pids))]
    return subprocess.Popen([*cmd, "--", "sleep", str(seconds)], stderr=subprocess.DEVNULL)


def _explain(conn: psycopg.Connection[Any], sql: str, **params: Any) -> dict[str, float]:
    row = conn.execute("EXPLAIN (ANALYZE, WAL, BUFFERS, FORMAT JSON) " + sql, params).fetchone()
    assert row is not None
    top = row[0][0]
    plan = top["Plan"]
    return {
        "wal records": plan.get("WAL Records", 0),
        "wal bytes": plan.get("WAL Bytes", 0),
        "buffers": plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0),
        "ms": top["Execution Time"] + top.get("Planning Time", 0.0),
    }


def _explained(app: rota.App, url: str, batches: int) -> None:
    """Claim and finish `batches` batches under EXPLAIN (ANALYZE, WAL, BUFFERS): the WAL and
    buffers a run costs, free of other databases' noise (time still isn't)."""
    queries, totals = app.store.queries, {"claim": {}, "finish_succeeded": {}}  # type: ignore[attr-defined]
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(batches):
            got = _explain(conn, queries["claim"], owner="explain", limit=BATCH, start=BATCH, lease=30.0, now=None)
            _add(totals["claim"], got)
            rows = conn.execute(
                "SELECT id, token, 'null' FROM rota_runs WHERE status = 'running' AND owner = 'explain'"
            )
            batch = json.dumps(rows.fetchall())
            _add(totals["finish_succeeded"], _explain(conn, queries["finish_succeeded"], rows=batch, now=None))
    runs = batches * BATCH
    for query, sums in totals.items():
        print(f"{query:17} per run: " + ", ".join(f"{k} {v / runs:.2f}" for k, v in sums.items()))


def _add(into: dict[str, float], got: dict[str, float]) -> None:
    for key, value in got.items():
        into[key] = into.get(key, 0.0) + value


def _measure(app: rota.App, url: str, n: int, perf: bool, batch: int) -> None:
    store = app.store
    store.poll_state(None)  # opens the pool's connection
    with psycopg.connect(url, autocommit=True) as conn:
        wal0 = _wal(conn)
        procs = [p for p in db_backends(DB) if p.pid != conn.info.backend_pid]
        spy = _perf([p.pid for p in procs], 5.0) if perf else None
        cpu0, t0 = cpu_of(procs), time.perf_counter()
        done = _drain(store, batch)
        wall, cpu1 = time.perf_counter() - t0, cpu_of(procs)
        cpu = sum(cpu1.get(pid, 0.0) - before for pid, before in cpu0.items())
        wal = _wal(conn) - wal0
        print(f"{done:,} runs in {wall:.2f} s: {done / wall:,.0f} runs/s, batches of {batch}")
        print(f"PostgreSQL CPU per run {cpu / done * 1e6:.1f} us; WAL per run {wal / done:.0f} bytes (whole server)")
        _indexes(conn)
    if spy is not None:
        spy.wait()
        report = ["perf", "report", "-i", "/tmp/profile_hot.perf", "--no-children", "--stdio", "-g", "none"]
        out = subprocess.run(report, capture_output=True, text=True).stdout
        print("\n".join(line for line in out.splitlines()[:60] if line and not line.startswith("#")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL, help="an admin URL (the database is created and dropped)")
    parser.add_argument("--runs", type=int, default=50_000)
    parser.add_argument("--backlog", type=int, default=0, help="rows first: half finished, half due in 30 days")
    parser.add_argument("--explain", type=int, default=0, help="first EXPLAIN this many claim+finish batches")
    parser.add_argument("--batch", type=int, default=BATCH, help="runs claimed, then finished, at once")
    parser.add_argument("--perf", action="store_true", help="perf record the backend (first 5 s)")
    args = parser.parse_args()
    with scratch_pg(args.pg_url, DB) as url:
        app = rota.App(url)

        @app.task(name="noop")
        def noop() -> None:
            return None

        if args.backlog:
            _enqueue(noop, args.backlog // 2)
            _drain(app.store)
            _enqueue(noop.options(delay=30 * 86400), args.backlog - args.backlog // 2)
        _enqueue(noop, args.runs)
        if args.explain:
            _explained(app, url, args.explain)
        _measure(app, url, args.runs - args.explain * BATCH, args.perf, args.batch)
        app.close()


if __name__ == "__main__":
    main()
