"""Where a tick's lateness goes on PostgreSQL (issue 19, target 5: p50 <= 2 ms): the claim of
one due run, timed at the store, after the database was left idle for a while, as a worker's
claim at a tick is (its last statement was the tick made ahead, about 0.3 s before, or the last
run's end, about a second before).

Each round enqueues one run, waits `gap` seconds, and times `store.claim` of it (then finishes
it); the first rounds of each setting are dropped. Settings alternate round by round in one
process: each idle gap with the claim's commit as rota makes it (`synchronous_commit=on`, the
server's default: the commit waits for the WAL flush) and, for comparison only, with
`synchronous_commit=off` on that connection (rota does not do this: a claim lost in a server
crash would let a second worker run the same run while the first still does).

    .venv/bin/python -m bench.tick_probe [--rounds 15] [--gaps 0,0.05,0.3,1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import rota
from bench.dbs import DEFAULT_PG_URL, _drop_db, _recreate_db
from rota.stores.base import Outcome

DROPPED = 3  # first rounds of each setting: connections and plans warming up


def _timed_claim(app: rota.App, task: Any, gap: float) -> float:
    task.enqueue()
    time.sleep(gap)
    began = time.perf_counter()
    got = app.store.claim("probe", 5, None, 30.0, 5)
    took = time.perf_counter() - began
    app.store.finish([Outcome(c.id, c.token, "succeeded", "null") for c in got])
    assert len(got) == 1, got
    return took


def _app(url: str, durable: bool) -> tuple[rota.App, Any]:
    if not durable:
        url += ("&" if "?" in url else "?") + "options=-csynchronous_commit%3Doff"
    app = rota.App(url)
    task = app.task(name="probe")(lambda: None)
    app.migrate()
    return app, task


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tick_probe", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--gaps", default="0,0.05,0.3,1")
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    args = parser.parse_args(argv)
    gaps = [float(g) for g in args.gaps.split(",")]
    url = _recreate_db(args.pg_url, "bench_tick_probe")
    apps = {durable: _app(url, durable) for durable in (True, False)}
    times: dict[tuple[float, bool], list[float]] = {(g, d): [] for g in gaps for d in (True, False)}
    try:
        for i in range(args.rounds):
            for gap in gaps:
                for durable in (True, False) if i % 2 == 0 else (False, True):
                    times[(gap, durable)].append(_timed_claim(*apps[durable], gap))
    finally:
        for app, _ in apps.values():
            app.close()
        _drop_db(args.pg_url, "bench_tick_probe")
    print(f"claim of one due run after an idle gap, {args.rounds - DROPPED} rounds each (median, min-max ms)\n")
    print("| idle gap | commit waits for the WAL flush (rota) | synchronous_commit=off |\n|--:|--:|--:|")
    for gap in gaps:
        cells = []
        for durable in (True, False):
            ms = [t * 1000 for t in times[(gap, durable)][DROPPED:]]
            cells.append(f"{statistics.median(ms):.2f} ({min(ms):.2f}-{max(ms):.2f})")
        print(f"| {gap:g} s | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
