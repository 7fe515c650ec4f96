"""Claims under a held-back vacuum (issue 45, item 3): a session idle in a transaction holds
the database's xmin horizon while a steady queue runs. Does the claim slow down?

Two phases of `--minutes` each on a PostgreSQL server of the probe's own (initdb'd on a free
port with the machine's binaries, autovacuum on at its defaults, as in production; the
shared test server has autovacuum off): first without the holder, then with a session that
ran `BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1` and then sat idle. In both, a producer
enqueues `--rate` runs a second and one consumer claims (`--batch` at a time) and finishes
them through the store, as a worker's finish-and-claim does. Every `--window` seconds it
prints the runs claimed per second, the claim statement's median and p95 time, the backlog
and rota_runs' dead tuples (pg_stat_user_tables); at the end, the ratio of the last window's
median claim time with the holder to the median without (target: at most 2x).

    .venv/bin/python -m bench.xmin_hold --minutes 10
    .venv/bin/python -m bench.xmin_hold --minutes 2 --rate 200   # a shorter look
    .venv/bin/python -m bench.xmin_hold --minutes 10 --free-minutes 3   # the holder's 10 minutes
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import psycopg

from rota.stores.base import NewRun, Outcome
from rota.stores.postgres import PostgresStore


def produce(store: PostgresStore, rate: float, stop: threading.Event) -> None:
    """`rate` runs a second, enqueued in batches every 50 ms (a fixed rate, not as fast as possible)."""
    began, sent = time.monotonic(), 0
    while not stop.is_set():
        due = int((time.monotonic() - began) * rate) - sent
        if due > 0:
            store.insert_runs([NewRun(task="bench.noop") for _ in range(due)], notify=False)
            sent += due
        stop.wait(0.05)


def consume(store: PostgresStore, batch: int, seconds: float, window: float, label: str) -> list[float]:
    """Claim and finish for `seconds`; one line per window; the claim times (seconds)."""
    times: list[float] = []
    end = time.monotonic() + seconds
    mark, claimed, win = time.monotonic(), 0, []
    while time.monotonic() < end:
        t0 = time.perf_counter()
        runs = store.claim("bench", batch, None, 30.0)
        took = time.perf_counter() - t0
        times.append(took)
        win.append(took)
        if runs:
            store.finish([Outcome(r.id, r.token, "succeeded", result="null") for r in runs])
            claimed += len(runs)
        else:
            time.sleep(0.005)
        if time.monotonic() - mark >= window:
            report(store, label, claimed / (time.monotonic() - mark), win)
            mark, claimed, win = time.monotonic(), 0, []
    return times


def report(store: PostgresStore, label: str, rate: float, win: list[float]) -> None:
    with store._read() as s:
        backlog = s.q_text("SELECT count(*) FROM rota_runs WHERE status = 'pending'")[0][0]
    health = store.vacuum_health()
    p95 = statistics.quantiles(win, n=20)[-1] if len(win) >= 20 else max(win)
    print(
        f"{label:<12} {rate:8.1f} claimed/s   claim p50 {statistics.median(win) * 1000:6.2f} ms  "
        f"p95 {p95 * 1000:6.2f} ms   backlog {backlog:6d}   dead rota_runs {health.dead_tuples.get('rota_runs', 0):8d}   "
        f"oldest xmin {max(0.0, health.oldest_xmin_seconds):6.0f} s",
        flush=True,
    )


def phase(url: str, args: argparse.Namespace, held: bool) -> float:
    """One phase; the median claim time of its last window."""
    minutes = args.minutes if held or args.free_minutes is None else args.free_minutes
    holder: AbstractContextManager[Any] = psycopg.connect(url) if held else nullcontext()
    with holder as conn:
        if conn is not None:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            conn.execute("SELECT 1")  # a snapshot taken: the session now holds the xmin horizon
        store = PostgresStore(url, pool_size=4)
        stop = threading.Event()
        producer = threading.Thread(target=produce, args=(store, args.rate, stop), daemon=True)
        producer.start()
        try:
            times = consume(store, args.batch, minutes * 60, args.window, "held" if held else "free")
        finally:
            stop.set()
            producer.join()
            store.close()
    tail = times[-max(1, len(times) // max(1, int(minutes * 60 / args.window))) :]
    return statistics.median(tail)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.xmin_hold", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="length of each phase (default 10)")
    parser.add_argument(
        "--free-minutes", type=float, help="length of the phase without the holder (default: --minutes)"
    )
    parser.add_argument("--rate", type=float, default=300.0, help="runs enqueued a second (default 300)")
    parser.add_argument("--batch", type=int, default=10, help="runs per claim (default 10)")
    parser.add_argument("--window", type=float, default=30.0, help="seconds per report line (default 30)")
    args = parser.parse_args()
    from tests.pg_cluster import Cluster  # the test suite's throwaway servers

    with Cluster.start(replica=False) as cluster:
        url = cluster.primary.url()
        PostgresStore(url).migrate()
        free = phase(url, args, held=False)
        cluster.primary.sql("TRUNCATE rota_runs CASCADE")  # the second phase starts as clean
        cluster.primary.sql("VACUUM ANALYZE")
        held = phase(url, args, held=True)
    print(f"claim p50, last window: {free * 1000:.2f} ms without the holder, {held * 1000:.2f} ms with it: "
          f"{held / free:.2f}x (target <= 2x)")  # fmt: skip


if __name__ == "__main__":
    main()
