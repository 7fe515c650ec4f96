"""W11 fan-in (issue 20): how soon a run that waits for 1,000 parents starts after the last of
them finished. The dependent becomes due in the transaction of its last parent's success
(the rota_run_settled trigger), so the gap is the worker's next claim, not a poll.

    python -m bench.fanin [--parents 1000] [--runs 5] [--pg-url URL]

Each run: a fresh database (a `bench_fanin` PostgreSQL database, dropped afterwards, or a new
SQLite file), 1,000 no-op parents enqueued in one batch, one dependent `after=` all of them,
then one worker (concurrency 100, in this process, default poll interval 1 s) drains them.
Gap = the dependent's started_at - the newest parent's finished_at, both read from the
database (one clock). Reported: median and min-max over the runs, per store.
"""

from __future__ import annotations

import argparse
import statistics
import time

import rota
from bench.dbs import scratch_store


def one_run(url: str, parents: int) -> float:
    """The gap in milliseconds for one fan-in on a fresh database."""
    app = rota.App(url, retention=None)

    @app.task(name="bench.parent")
    def parent(i: int) -> int:
        return i

    @app.task(name="bench.child")
    def child() -> None: ...

    app.migrate()
    ids = parent.enqueue_many([((i,), {}) for i in range(parents)])
    dependent = child.options(after=ids).enqueue()
    worker = app.worker(concurrency=100, install_signal_handlers=False)
    worker.start()
    try:
        run = dependent.wait(timeout=120)
    finally:
        worker.stop(wait=True, timeout=30)
    finished = [r.finished_at for r in app.list_runs(task="bench.parent", limit=parents) if r.finished_at]
    app.close()
    assert run.status == "succeeded" and run.started_at is not None and len(finished) == parents, run
    return (run.started_at - max(finished)).total_seconds() * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parents", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--only", choices=("postgres", "sqlite"), default=None)
    args = parser.parse_args()
    backends = [args.only] if args.only else ["postgres", "sqlite"]
    gaps: dict[str, list[float]] = {b: [] for b in backends}
    started = time.monotonic()
    for _ in range(args.runs):  # interleaved: run 1 of each store, then run 2, ...
        for backend in backends:
            with scratch_store(backend, args.pg_url, "bench_fanin") as url:
                gaps[backend].append(one_run(url, args.parents))
    print(f"W11 fan-in: {args.parents:,} parents, one dependent, 1 worker at concurrency 100, {args.runs} runs")
    print("| store | gap median (ms) | min-max (ms) | target |")
    print("|---|--:|--:|---|")
    for backend, values in gaps.items():
        median = statistics.median(values)
        ok = "met" if median <= 50 else "**missed**"
        print(f"| {backend} | {median:.1f} | {min(values):.1f}-{max(values):.1f} | <= 50 ms: {ok} |")
    print(f"wall time {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
