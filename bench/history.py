"""Issue 19, target 2: does a run's cost grow with the history kept?

For each store and each history size (final runs kept), builds the history and measures:

- **drain**: DUE no-op runs drained by one in-process worker (concurrency 100), right after a
  burst, DRAINS times (the median); the rate against the same store's with no history (the
  first size should be 0). Every size's database is built first, and the drains alternate
  between them (ABBA), so that the machine's drift between drains moves every size alike;
- **listings**: `app.list_runs` by status, task, schedule, task + status, a page deep in the
  history (`before=`), and the dashboard's 24 h throughput and lateness charts (by time):
  p50 and p95 over REPEATS calls each;
- **prune**: PRUNE old runs deleted in the maintenance task's time-sized batches while a worker process
  runs a probe task enqueued at a steady rate: the longest prune statement, and the probe's
  start lateness (start - enqueue) before and during the prune.

The history: all but the last BURST runs are inserted by SQL as the rows a worker leaves
(succeeded; 1 in 50 failed, 1 in 97 cancelled; 19 tasks; a quarter from 40 schedules; spread
over the 30 days before the burst), then BURST runs are enqueued and drained through a real
worker, so the drain is measured right after a burst (its dead index entries not vacuumed).
On PostgreSQL the server's autovacuum setting is printed: with it off, the drains also leave
their dead entries behind, on every size alike.

    .venv/bin/python -m bench.history [--stores sqlite,postgres] [--sizes 0,1000000,10000000]
        [--drains 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import rota
from bench.dbs import DEFAULT_PG_URL, scratch_pg
from rota.web.charts import lateness_data, throughput_data, window
from rota.worker.maintenance import PruneBatch, statement_target

DUE, DRAINS, BURST, REPEATS, PRUNE = 50_000, 3, 200_000, 30, 1_000_000
FILL_CHUNK = 500_000
DAY = 86400.0
Result = dict[str, Any]

# On PostgreSQL (schema 17) a succeeded run of no schedule is kept in rota_history, the rest in
# rota_runs, as the product leaves them: {table} and {which} are filled in once per table.
FILL_POSTGRES = """
INSERT INTO {table} (id, task, status, schedule, tick, scheduled_for, due_at, attempt, max_attempts,
                     owner, token, created_at, started_at, finished_at, result, error)
SELECT i, 'task-' || (i %% 19), st, sch, CASE WHEN sch IS NOT NULL THEN t END, t, t, 1, 1,
       'bench-history', i, t, t, t + interval '5 ms',
       CASE WHEN st = 'succeeded' THEN 'null' END,
       CASE WHEN st <> 'succeeded' THEN '{"type": "ValueError", "message": "bench", "traceback": null}' END
FROM (SELECT i, to_timestamp(%(start)s + i * %(step)s) AS t,
             CASE WHEN i %% 97 = 0 THEN 'cancelled' WHEN i %% 50 = 0 THEN 'failed' ELSE 'succeeded' END AS st,
             CASE WHEN i %% 4 = 0 THEN 'schedule-' || ((i / 4) %% 40) END AS sch
      FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) i) s
WHERE {which}
"""
KEPT = "st = 'succeeded' AND sch IS NULL"
FILL_SQLITE = """
WITH RECURSIVE seq(i) AS (SELECT :lo UNION ALL SELECT i + 1 FROM seq WHERE i < :hi),
s AS (SELECT i, :start + i * :step AS t,
             CASE WHEN i % 97 = 0 THEN 'cancelled' WHEN i % 50 = 0 THEN 'failed' ELSE 'succeeded' END AS st,
             CASE WHEN i % 4 = 0 THEN 'schedule-' || ((i / 4) % 40) END AS sch
      FROM seq)
INSERT INTO rota_runs (task, status, schedule, tick, scheduled_for, due_at, attempt, max_attempts,
                       owner, token, created_at, started_at, finished_at, result, error)
SELECT 'task-' || (i % 19), st, sch, CASE WHEN sch IS NOT NULL THEN t END, t, t, 1, 1,
       'bench-history', i, t, t, t + 0.005,
       CASE WHEN st = 'succeeded' THEN 'null' END,
       CASE WHEN st <> 'succeeded' THEN '{"type": "ValueError", "message": "bench", "traceback": null}' END
FROM s
"""


@contextlib.contextmanager
def database(store: str, size: int, pg_url: str) -> Iterator[str]:
    if store == "postgres":
        with scratch_pg(pg_url, f"bench_history_{size}") as url:
            _say_autovacuum(url)
            yield url
        return
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        yield f"sqlite:///{tmp}/history.db"


def _say_autovacuum(url: str) -> None:
    """Print the server's autovacuum setting: with it off (as in a CI image), nothing removes
    the burst's dead index entries, which every claim then steps over (the drain's worst case)."""
    import psycopg

    with psycopg.connect(url) as pg:
        row = pg.execute("SHOW autovacuum").fetchone()
    print(f"# postgres: autovacuum={row[0] if row else '?'}", file=sys.stderr, flush=True)


def fill(app: rota.App, url: str, rows: int) -> None:
    """`rows` final runs by SQL, spread over the 30 days before now, ids in time order."""
    start, step = time.time() - 30 * DAY, (30 * DAY - 3600) / max(rows, 1)
    for lo in range(1, rows + 1, FILL_CHUNK):
        params = {"lo": lo, "hi": min(rows, lo + FILL_CHUNK - 1), "start": start, "step": step}
        if url.startswith("sqlite"):
            import sqlite3

            with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
                conn.execute(FILL_SQLITE, params)
        else:
            import psycopg

            with psycopg.connect(url) as pg:
                for table, which in (("rota_history", KEPT), ("rota_runs", f"NOT ({KEPT})")):
                    pg.execute(FILL_POSTGRES.replace("{table}", table).replace("{which}", which), params)
                pg.execute("SELECT setval('rota_run_id_seq', %(hi)s)", params)


def enqueue(task: Any, n: int, chunk: int = 10_000) -> None:
    for offset in range(0, n, chunk):
        task.enqueue_many([((), {})] * min(chunk, n - offset))


def drain(app: rota.App) -> int:
    worker = app.worker(concurrency=100, install_signal_handlers=False)
    return asyncio.run(worker.run_until_idle())


def timed(call: Callable[[], object], repeats: int = REPEATS) -> Result:
    call()  # warm: a first call may plan or read cold pages
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return {"p50_ms": statistics.median(times), "p95_ms": times[int(0.95 * (len(times) - 1))], "max_ms": times[-1]}


def listings(app: rota.App) -> dict[str, Result]:
    newest = app.list_runs(limit=1)
    deep = int(newest[0].id) // 2 if newest else 1
    calls: dict[str, Callable[[], object]] = {
        "status=failed": lambda: app.list_runs(status="failed"),
        "status=succeeded": lambda: app.list_runs(status="succeeded"),
        "task": lambda: app.list_runs(task="task-7"),
        "schedule": lambda: app.list_runs(schedule="schedule-3"),
        "task+status=failed": lambda: app.list_runs(task="task-7", status="failed"),
        "schedule+status=cancelled": lambda: app.list_runs(schedule="schedule-3", status="cancelled"),
        "schedule+status=failed (none)": lambda: app.list_runs(schedule="schedule-3", status="failed"),
        "page before=middle": lambda: app.list_runs(before=deep),
        "status=failed before=middle": lambda: app.list_runs(status="failed", before=deep),
        "chart throughput 24h": lambda: throughput_data(app, window(app, {"window": "24h"})),
        "chart lateness 24h": lambda: lateness_data(app, window(app, {"window": "24h"})),
        "chart throughput 7d task": lambda: throughput_data(app, window(app, {"window": "7d", "task": "task-7"})),
    }
    return {name: timed(call) for name, call in calls.items()}


class ProbeWorker:
    """A worker process running `probe` runs that a thread here enqueues RATE times a second."""

    RATE = 50

    def __init__(self, url: str, tmp: Path) -> None:
        self.late_file = tmp / "late.txt"
        env = {**os.environ, "ROTA_DATABASE_URL": url, "ROTA_BENCH_LATE": str(self.late_file)}
        cmd = [sys.executable, "-m", "rota", "worker", "bench.history_app:app", "-c", "4", "--poll-interval", "0.01"]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.stop = threading.Event()
        self.app = rota.App(url, retention=None)

        @self.app.task(name="probe")
        def probe(enqueued: float) -> None:  # the worker process runs bench.history_app's
            return None

        self.probe = probe
        self.thread = threading.Thread(target=self._feed, daemon=True)

    def _feed(self) -> None:
        while not self.stop.is_set():
            self.probe.enqueue(time.time())
            time.sleep(1 / self.RATE)

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        time.sleep(1.0)
        self.proc.terminate()
        self.proc.wait(30)
        self.app.close()

    def lateness(self, lo: float, hi: float) -> Result:
        lines = self.late_file.read_text().split("\n") if self.late_file.exists() else []
        late = sorted(float(b) for a, b in (line.split() for line in lines if line) if lo <= float(a) < hi)
        if not late:
            return {"n": 0}
        return {"n": len(late), "p50_ms": statistics.median(late), "p99_ms": late[int(0.99 * (len(late) - 1))],
                "max_ms": late[-1]}  # fmt: skip


def prune(app: rota.App, url: str, older_than: float) -> Result:
    """PRUNE runs deleted in the maintenance task's batches and pauses (PruneBatch), with
    the probe's lateness for 10 s before and over the prune."""
    with tempfile.TemporaryDirectory(prefix="bench-history-probe-") as tmp:
        probe = ProbeWorker(url, Path(tmp))
        probe.start()
        time.sleep(12.0)  # the worker starts, then 10 s of lateness without a prune
        before_hi = time.time()
        statements, sizes, total, batch, after = [], [], 0, PruneBatch(target=statement_target(app.store)), 0.0
        while total < PRUNE:
            size, t0 = batch.size, time.perf_counter()
            n, after = app.store.prune_from("succeeded", older_than, size, after)
            took = time.perf_counter() - t0
            statements.append(took * 1000)
            sizes.append(size)
            total += n
            if n < size:
                break
            batch.took(n, took)
            time.sleep(batch.pause(took))
        during_hi = time.time()
        probe.close()
        statements.sort()
        return {
            "pruned": total,
            "seconds": during_hi - before_hi,
            "statement_p50_ms": statistics.median(statements),
            "statement_p99_ms": statements[int(0.99 * (len(statements) - 1))],
            "statement_max_ms": statements[-1],
            "batch_median": statistics.median(sizes),
            "probe_before": probe.lateness(before_hi - 10.0, before_hi),
            "probe_during": probe.lateness(before_hi, during_hi),
        }


class Kept:
    """One store's database holding `size` final runs, built and burst-drained, ready to drain."""

    def __init__(self, store: str, size: int, url: str) -> None:
        self.store, self.size, self.url = store, size, url
        self.app = rota.App(url, retention=None)

        @self.app.task(name="noop")
        def noop() -> None:
            return None

        self.noop = noop
        t0 = time.perf_counter()
        self.app.prepare()  # the schema, before the SQL fill
        fill(self.app, url, max(0, size - BURST))
        enqueue(noop, min(size, BURST))
        drain(self.app)
        self.setup_s = time.perf_counter() - t0
        self.rates: list[float] = []

    def drain_once(self) -> None:
        enqueue(self.noop, DUE)
        t0, wall = time.perf_counter(), time.time()
        self.rates.append(drain(self.app) / (time.perf_counter() - t0))
        # (wall-clock times: to match a slow drain with autovacuum or other load)
        print(f"# {self.store} {self.size:,}: drain {len(self.rates)} at {wall:.2f}-{time.time():.2f}, "
              f"{self.rates[-1]:,.0f} runs/s", file=sys.stderr, flush=True)  # fmt: skip

    def result(self, with_prune: bool) -> Result:
        result: Result = {"store": self.store, "size": self.size, "setup_s": self.setup_s}
        result["drain_rate"] = statistics.median(self.rates)
        result["drain_rates"] = self.rates
        result["listings"] = listings(self.app)
        if with_prune and self.size >= PRUNE + BURST:
            result["prune"] = prune(self.app, self.url, older_than=DAY)
        self.app.close()
        return result


def measure(store: str, sizes: list[int], pg_url: str, with_prune: bool) -> list[Result]:
    """Build every size's database, then drain them in alternated rounds (the sizes in order,
    then in reverse: ABBA for two sizes, balanced for an even number of drains), so that a
    machine that speeds up or slows down between drains moves every size alike; then the
    listings and the prune of each."""
    with contextlib.ExitStack() as stack:
        kept = [Kept(store, size, stack.enter_context(database(store, size, pg_url))) for size in sizes]
        for i in range(DRAINS):
            for k in kept if i % 2 == 0 else reversed(kept):
                k.drain_once()
        return [k.result(with_prune) for k in kept]


def report(results: list[Result]) -> None:
    empty = {r["store"]: r["drain_rate"] for r in results if r["size"] == 0}
    print("| store | history | drain runs/s (median, min-max) | vs empty | slowest listing p95 (ms) |")
    print("|---|---:|---:|---:|---|")
    for r in results:
        ratio = f"{100 * r['drain_rate'] / empty[r['store']]:.0f} %" if r["store"] in empty else "-"
        name, worst = max(r["listings"].items(), key=lambda kv: kv[1]["p95_ms"])
        spread = f"{min(r['drain_rates']):,.0f}-{max(r['drain_rates']):,.0f}"
        print(
            f"| {r['store']} | {r['size']:,} | {r['drain_rate']:,.0f} ({spread}) | {ratio} "
            f"| {worst['p95_ms']:.1f} ({name}) |"
        )
    for r in results:
        print(f"\n{r['store']}, {r['size']:,} runs: listings p50 / p95 ms")
        for name, t in r["listings"].items():
            print(f"  {name:32} {t['p50_ms']:8.2f} {t['p95_ms']:8.2f}")
        if "prune" in r:
            print(f"  prune: {json.dumps(r['prune'], default=lambda v: round(v, 2))}")


def main() -> None:
    global DUE, BURST, PRUNE, DRAINS
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--sizes", default="0,1000000,10000000", help="final runs kept, comma-separated")
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL, help="an admin URL (databases are created and dropped)")
    parser.add_argument("--no-prune", action="store_true", help="skip the prune measurement")
    parser.add_argument("--small", action="store_true", help="a smoke run: 2,000 due, 5,000 burst, 20,000 pruned")
    parser.add_argument("--drains", type=int, default=DRAINS, help=f"drains per size (default {DRAINS})")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    if args.drains < 1:
        parser.error(f"--drains {args.drains}: give 1 or more drains per size (an even number balances the order)")
    DRAINS = args.drains
    if args.small:
        DUE, BURST, PRUNE = 2_000, 5_000, 20_000
    results = []
    for store in args.stores.split(","):
        for result in measure(store, [int(s) for s in args.sizes.split(",")], args.pg_url, not args.no_prune):
            results.append(result)
            print(f"# {store} {result['size']:,}: {json.dumps(result, default=lambda v: round(v, 2))}", flush=True)
    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
