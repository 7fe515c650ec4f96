"""What the upgrade to schema 17 costs on PostgreSQL: the workers' history sweep moving the
succeeded runs an earlier schema kept in rota_runs, and what a worker's claims see meanwhile.

A fresh database at every migration gets `--runs` succeeded one-off runs in rota_runs by SQL
(as a version-16 database holds them; 1 in 50 failed and 1 in 4 of a schedule, which stay),
VACUUM ANALYZE, then the sweep's statements (`Store.move_history`, `--batch` runs each, then a
pause three times as long, as rota.worker.maintenance does) move them all, while a second
connection claims and finishes a run every 10 ms. It prints the move's time and rate, its
statements' p50 / p99 / max, and the probe's claim-and-finish p50 / p99 before and during.

    .venv/bin/python -m bench.history_move --runs 1000000
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

import rota
from bench.dbs import DEFAULT_PG_URL, scratch_pg
from rota.stores.base import NewRun, Outcome
from rota.worker.maintenance import SWEEP_BATCH, PruneBatch

FILL = """
INSERT INTO rota_runs (task, status, schedule, tick, scheduled_for, due_at, attempt, started_at, finished_at, result)
SELECT 'task-' || (i %% 19), CASE WHEN i %% 50 = 0 THEN 'failed' ELSE 'succeeded' END,
       CASE WHEN i %% 4 = 0 THEN 'schedule-' || (i %% 40) END,
       CASE WHEN i %% 4 = 0 THEN now() - make_interval(secs => i) END,
       now(), now(), 1, now(), now(), 'null'
FROM generate_series(1, %(runs)s) i
"""


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))] * 1000 if ordered else float("nan")


class Probe:
    """Claims and finishes one run every 10 ms on its own app; records each round trip."""

    def __init__(self, url: str) -> None:
        self.app = rota.App(url)
        self.times: list[tuple[float, float]] = []  # (when, seconds)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        store = self.app.store
        while not self.stop.is_set():
            store.insert_runs([NewRun(task="probe")])
            t0 = time.perf_counter()
            (claimed,) = store.claim("probe", 1, None, 30.0)
            store.finish([Outcome(claimed.id, claimed.token, "succeeded", result="null")])
            self.times.append((t0, time.perf_counter() - t0))
            time.sleep(0.01)

    def between(self, lo: float, hi: float) -> list[float]:
        return [s for t, s in self.times if lo <= t < hi]


def measure(url: str, runs: int, batch: int) -> dict[str, Any]:
    import psycopg

    app = rota.App(url)
    app.migrate()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(FILL, {"runs": runs})
        conn.execute("VACUUM ANALYZE")
    probe = Probe(url)
    probe.thread.start()
    time.sleep(3.0)
    started, statements, moved = time.perf_counter(), list[float](), 0
    while True:
        t0 = time.perf_counter()
        n = app.store.move_history(batch)
        statements.append(time.perf_counter() - t0)
        moved += n
        if n < batch:
            break
        time.sleep(PruneBatch.pause(statements[-1]))
    ended = time.perf_counter()
    probe.stop.set()
    probe.thread.join()
    probe.app.close()
    app.close()
    before, during = probe.between(started - 3.0, started), probe.between(started, ended)
    return {
        "moved": moved,
        "seconds": ended - started,
        "statements": statements,
        "probe_before": before,
        "probe_during": during,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.history_move", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=SWEEP_BATCH)
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    args = parser.parse_args(argv)
    with scratch_pg(args.pg_url, "bench_history_move") as url:
        got = measure(url, args.runs, args.batch)
    s = got["statements"]
    print(
        f"moved {got['moved']:,} of {args.runs:,} runs in {got['seconds']:.1f} s"
        f" ({got['moved'] / got['seconds']:,.0f} runs/s with the pauses), {len(s)} statements of {args.batch}:"
        f" p50 {_pct(s, 0.5):.1f} ms, p99 {_pct(s, 0.99):.1f} ms, max {max(s) * 1000:.1f} ms"
    )
    for name in ("probe_before", "probe_during"):
        values = got[name]
        print(
            f"{name}: claim + finish p50 {_pct(values, 0.5):.2f} ms, p99 {_pct(values, 0.99):.2f} ms"
            f" (n={len(values)}, mean {statistics.fmean(values) * 1000 if values else float('nan'):.2f} ms)"
        )


if __name__ == "__main__":
    main()
