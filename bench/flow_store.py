"""W10 at the store, with no worker in the way (issue 20): drain N no-op runs through
`finish_and_claim` in batches of 100 on PostgreSQL, for a task without a limit, one with
`limit=100` (one loop of 100), and the same limit shared by two loops of 50 on their own
connections (two finish-and-claims in flight, as a pipelined worker would send them).

    .venv/bin/python -m bench.flow_store [--rounds 3] [--runs 20000]

Modes alternate their order round by round; each run gets a fresh bench_* database.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

import rota
from bench.dbs import DEFAULT_PG_URL, _drop_db, _recreate_db
from rota.stores.base import Outcome

MODES = ("no limit", "limit=100, one loop", "limit=100, two loops")


def _loop(store: Any, size: int, runs: int, done: list[int], lock: threading.Lock) -> None:
    """Finish what the last call claimed and claim `size` more, until `runs` are done."""
    got = store.claim("probe", size, None, 30.0, size)
    while True:
        outcomes = [Outcome(c.id, c.token, "succeeded", "null") for c in got]
        if not outcomes:
            with lock:
                if done[0] >= runs:
                    return
            got = store.claim("probe", size, None, 30.0, size)  # the other loop holds the slots
            continue
        _, got = store.finish_and_claim(outcomes, "probe", size, None, 30.0, size)
        with lock:
            done[0] += len(outcomes)


def one(admin_url: str, mode: str, runs: int) -> float:
    """Runs per second of one drain in `mode`."""
    name = "bench_flow_store"
    app = rota.App(_recreate_db(admin_url, name))
    try:
        task = app.task(name="noop", limit=None if mode == "no limit" else 100)(lambda: None)
        app.prepare()  # declares the limit, as a worker's start does
        task.enqueue_many([((), {}) for _ in range(runs)])
        loops = 2 if mode.endswith("two loops") else 1
        done, lock = [0], threading.Lock()
        threads = [
            threading.Thread(target=_loop, args=(app.store, 100 // loops, runs, done, lock)) for _ in range(loops)
        ]
        began = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.perf_counter() - began
        assert done[0] == runs, (mode, done[0], runs)
        return runs / took
    finally:
        app.close()
        _drop_db(admin_url, name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.flow_store", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    args = parser.parse_args(argv)
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    for i in range(args.rounds):
        for mode in MODES if i % 2 == 0 else MODES[::-1]:
            rates[mode].append(one(args.pg_url, mode, args.runs))
    plain = statistics.median(rates["no limit"])
    print(f"{args.runs:,} runs, batches of 100, {args.rounds} rounds\n")
    print("| mode | runs/s (median) | min-max | vs no limit |\n|---|--:|--:|--:|")
    for mode, got in rates.items():
        median = statistics.median(got)
        print(f"| {mode} | {median:,.0f} | {min(got):,.0f}-{max(got):,.0f} | {median / plain:.2f}x |")


if __name__ == "__main__":
    main()
