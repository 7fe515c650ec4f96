"""Durable steps (issue 43): what a step checkpoint costs, and how fast a signal resumes a
parked run.

1. Checkpoint cost: a worker (concurrency 8) drains N runs of a no-op task, of a task with one
   `ctx.step`, and of one with three; runs/s per store, medians of alternated rounds (each
   round a fresh database), the ratio to the no-op task, and the cost of one checkpoint as
   the issue defines it: (time per run of the task - time per no-op run) / time per no-op
   run, per step (from the medians). With it, the checkpoints per statement batch (the
   worker's group commit; 1.0: every checkpoint written on its own).
2. Resume latency: runs parked in `ctx.wait_for`, an idle worker; the time from `App.signal`
   returning to the handler passing its wait, p50/p95 over the samples.
3. With `--parked N`: the CPU an idle worker uses (this process's CPU time over `--idle` s of
   wall time) with no runs, and with N runs parked in a one-day sleep.

    .venv/bin/python -m bench.durable [--stores sqlite,postgres] [--rounds 3] [--runs 2000] [--signals 50] [--modes ...]
                                      [--parked 10000 --idle 20]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

import rota
from bench.dbs import DEFAULT_PG_URL, scratch_store

MODES = ("no-op", "1 step", "3 steps", "1 step (returned)", "3 steps (last returned)")
STEPS = {"no-op": 0, "1 step": 1, "3 steps": 3, "1 step (returned)": 1, "3 steps (last returned)": 3}


def _drain(url: str, mode: str, runs: int) -> tuple[float, float]:
    """Runs per second of a worker draining `runs` runs of `mode`, and the checkpoints per
    batch its group commit wrote (0: none, or a rota without group commit)."""
    app = rota.App(url, poll_interval=0.05, retention=None)
    steps = STEPS[mode]

    @app.task(name="work", pass_context=True)
    def work(ctx: rota.RunContext) -> None:
        for i in range(steps):  # each checkpoint committed before its step returns
            ctx.step(f"s{i}", int, i)

    @app.task(name="work_returned", pass_context=True)
    def work_returned(ctx: rota.RunContext) -> Any:
        for i in range(steps - 1):
            ctx.step(f"s{i}", int, i)
        return ctx.step("last", int, 1)  # returned at once: written with the run's finish

    app.migrate()
    (work_returned if "returned" in mode else work).enqueue_many([((), {}) for _ in range(runs)])
    worker = app.worker(concurrency=8, install_signal_handlers=False)
    began = time.perf_counter()
    worker.start()
    try:
        while app.stats()["runs"].get("succeeded", 0) < runs:
            time.sleep(0.02)
        rate = runs / (time.perf_counter() - began)
        commits = getattr(app.store, "_checkpoints", None)
        return rate, (commits.written / commits.batches) if commits is not None and commits.batches else 0.0
    finally:
        worker.stop(wait=True, timeout=30)
        app.close()


def _resume(url: str, samples: int) -> list[float]:
    """Seconds from App.signal to the handler past its wait, one parked run at a time."""
    app = rota.App(url, poll_interval=1.0, retention=None)
    passed: dict[str, float] = {}
    ready = threading.Event()

    @app.task(name="waiter", pass_context=True)
    def waiter(ctx: rota.RunContext) -> None:
        ctx.wait_for("go", timeout=600)
        passed[ctx.run_id] = time.perf_counter()
        ready.set()

    app.migrate()
    worker = app.worker(concurrency=4, install_signal_handlers=False)
    worker.start()
    took: list[float] = []
    try:
        for _ in range(samples):
            ref = waiter.enqueue()
            while app.get_run(ref.id).waiting is None:
                time.sleep(0.01)
            time.sleep(0.05)  # the worker idle again
            ready.clear()
            sent = time.perf_counter()
            app.signal(ref.id, "go")
            ready.wait(30)
            took.append(passed[ref.id] - sent)
    finally:
        worker.stop(wait=True, timeout=30)
        app.close()
    return took


def _idle_cpu(url: str, parked: int, idle: float) -> float:
    """Percent of one core this process uses while its worker idles, `parked` runs parked."""
    app = rota.App(url, retention=None)

    @app.task(name="sleeper", pass_context=True)
    def sleeper(ctx: rota.RunContext) -> None:
        ctx.sleep(86400)

    app.migrate()
    for start in range(0, parked, 1000):
        sleeper.enqueue_many([((), {}) for _ in range(min(1000, parked - start))])
    worker = app.worker(concurrency=8, install_signal_handlers=False)
    worker.start()
    try:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:  # every run parked: pending, none due
            stats = app.stats()["runs"]
            if stats.get("running", 0) == 0 and _waits(app) >= parked:
                break
            time.sleep(0.5)
        time.sleep(2.0)
        cpu, wall = time.process_time(), time.perf_counter()
        time.sleep(idle)
        return 100 * (time.process_time() - cpu) / (time.perf_counter() - wall)
    finally:
        worker.stop(wait=True, timeout=30)
        app.close()


def _waits(app: rota.App) -> int:
    store: Any = app.store
    with store._read() as s:
        return int(s.q_text("SELECT count(*) FROM rota_waits")[0][0])


def _table(store: str, args: Any, rates: dict[str, list[float]], batches: dict[str, list[float]]) -> None:
    base = statistics.median(rates["no-op"])
    print(f"\n{store}: {args.runs:,} runs, concurrency 8, {args.rounds} rounds (alternated)\n")
    print("| task | runs/s (median) | min-max | vs no-op | cost of a checkpoint (% of a no-op run) "
          "| checkpoints per batch |\n|---|--:|--:|--:|--:|--:|")  # fmt: skip
    for mode in rates:
        median = statistics.median(rates[mode])
        low, high = min(rates[mode]), max(rates[mode])
        steps = STEPS[mode]
        cost = f"{100 * (base / median - 1) / steps:.0f} %" if steps else "-"
        per_batch = f"{statistics.median(batches[mode]):.1f}" if steps and max(batches[mode]) else "-"
        print(f"| {mode} | {median:,.0f} | {low:,.0f}-{high:,.0f} | {median / base:.2f}x | {cost} | {per_batch} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.durable", description=__doc__.split("\n")[0])
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--signals", type=int, default=50)
    parser.add_argument("--modes", default=",".join(MODES), help="which tasks (the no-op is always run)")
    parser.add_argument("--parked", type=int, default=0)
    parser.add_argument("--idle", type=float, default=20.0)
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    args = parser.parse_args(argv)
    for store in args.stores.split(","):
        modes = [m for m in MODES if m == "no-op" or m in args.modes.split(",")]
        rates: dict[str, list[float]] = {mode: [] for mode in modes}
        batches: dict[str, list[float]] = {mode: [] for mode in modes}
        for i in range(args.rounds):
            for mode in modes if i % 2 == 0 else modes[::-1]:
                with scratch_store(store, args.pg_url, "bench_durable") as url:
                    rate, per_batch = _drain(url, mode, args.runs)
                    rates[mode].append(rate)
                    batches[mode].append(per_batch)
        _table(store, args, rates, batches)
        if not args.signals:
            continue
        with scratch_store(store, args.pg_url, "bench_durable") as url:
            took = sorted(_resume(url, args.signals))
        p95 = took[max(0, int(len(took) * 0.95) - 1)]
        if args.parked:
            with scratch_store(store, args.pg_url, "bench_durable") as url:
                empty = _idle_cpu(url, 0, args.idle)
            with scratch_store(store, args.pg_url, "bench_durable") as url:
                full = _idle_cpu(url, args.parked, args.idle)
            print(
                f"\nidle worker CPU over {args.idle:g} s: {empty:.2f} % with no runs, {full:.2f} % with {args.parked:,} parked"
            )
        print(f"\nresume after a signal ({len(took)} samples, idle worker): "
              f"p50 {statistics.median(took) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
