"""enqueue_many of runs with a limit or a rate, against the same call for a task without
either (issue 20's controls must not make enqueue slow).

    python -m bench.flow_enqueue [--runs 3] [--n 20000] [--pg-url URL] [--only postgres|sqlite]

Each run, per store and task kind: a fresh database (a `bench_flow_enqueue` PostgreSQL
database, dropped afterwards, or a new SQLite file), one `enqueue_many` call of `--n` runs,
timed from the client. Kinds: no limit; `limit=100`; `Limit(1, by="k")` over 1,000 keys;
`Rate(5, per=1)`. Runs are interleaved (run 1 of every case, then run 2, ...); reported:
the median, min-max, and the ratio to the plain task's median.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import rota
from bench.dbs import DEFAULT_PG_URL, scratch_store

KINDS: dict[str, dict[str, Any]] = {
    "no limit": {},
    "limit=100": {"limit": 100},
    "Limit(1, by=k), 1,000 keys": {"limit": rota.Limit(1, by="k")},
    "Rate(5, per=1)": {"rate": rota.Rate(5, per=1)},
}


def one_run(url: str, options: dict[str, Any], n: int) -> float:
    """Seconds for one enqueue_many of `n` runs of a task declared with `options`."""
    app = rota.App(url, retention=None)
    try:

        @app.task(name="bench.enqueued", **options)
        def enqueued(k: int) -> None:
            """Never run: only enqueued."""

        app.migrate()
        app.prepare()  # stores the limits, as a worker does at start
        calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [((i % 1000,), {}) for i in range(n)]
        started = time.perf_counter()
        enqueued.enqueue_many(calls)
        return time.perf_counter() - started
    finally:
        app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--only", choices=("postgres", "sqlite"), default=None)
    args = parser.parse_args()
    backends = [args.only] if args.only else ["postgres", "sqlite"]
    seconds: dict[tuple[str, str], list[float]] = {(b, k): [] for b in backends for k in KINDS}
    for _ in range(args.runs):
        for backend, kind in seconds:
            with scratch_store(backend, args.pg_url, "bench_flow_enqueue") as url:
                seconds[(backend, kind)].append(one_run(url, KINDS[kind], args.n))
    print(f"enqueue_many of {args.n:,} runs, one call, {args.runs} runs each (interleaved)")
    print("| store | task | runs/s (median) | min-max | x no limit |")
    print("|---|---|--:|--:|--:|")
    for (backend, kind), values in seconds.items():
        rate = args.n / statistics.median(values)
        plain = args.n / statistics.median(seconds[(backend, "no limit")])
        low, high = args.n / max(values), args.n / min(values)
        print(f"| {backend} | {kind} | {rate:,.0f} | {low:,.0f}-{high:,.0f} | {rate / plain:.2f}x |")


if __name__ == "__main__":
    main()
