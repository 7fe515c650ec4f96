"""Durable steps (issue 43): what a step checkpoint costs, and how fast a signal resumes a
parked run.

1. Checkpoint cost: a worker (`--concurrency`, 8) drains N runs of a no-op task, of a task
   with one `ctx.step`, and of one with three; runs/s per store, medians of alternated rounds
   (each round a fresh database), the ratio to the no-op task, and the cost of one checkpoint
   as the issue defines it, read as wall time: (time per run of the task - time per no-op
   run) / time per no-op run, per step (from the medians). With it, the checkpoints per
   statement batch (the worker's group commit; 1.0: every checkpoint written on its own).
   Then the same cost read as resources (bench/durable_meter.py): worker and database-server
   CPU per run, the checkpoint's CPU as a share of a no-op run's, and on PostgreSQL the
   statements and commits per run and per checkpoint.
2. Resume latency: runs parked in `ctx.wait_for`, an idle worker; the time from `App.signal`
   returning to the handler passing its wait, p50/p95 over the samples.
3. With `--parked N`: the CPU an idle worker uses (this process's CPU time over `--idle` s of
   wall time) with no runs, and with N runs parked in a one-day sleep.

    .venv/bin/python -m bench.durable [--stores sqlite,postgres,mysql] [--rounds 3] [--runs 2000] [--concurrency 8]
                                      [--signals 50] [--modes ...]
                                      [--parked 10000 --idle 20]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any

import rota
from bench.dbs import DEFAULT_MYSQL_URL, DEFAULT_PG_URL, scratch_store
from bench.durable_meter import DrainMeter

MODES = ("no-op", "1 step", "3 steps", "1 step (returned)", "3 steps (last returned)")
STEPS = {"no-op": 0, "1 step": 1, "3 steps": 3, "1 step (returned)": 1, "3 steps (last returned)": 3}


class _Handled:
    """Handlers done (the bench's in-process count: the database is polled only at the end),
    with an event per mark: the CPU window's ends."""

    def __init__(self, *marks: int) -> None:
        self.done: list[None] = []  # list.append: atomic across the handlers' threads
        self.marks = {mark: threading.Event() for mark in marks}

    def __len__(self) -> int:
        return len(self.done)

    def add(self) -> None:
        self.done.append(None)
        for mark, reached in self.marks.items():
            if len(self.done) >= mark and not reached.is_set():
                reached.set()

    def wait(self, mark: int, meter: DrainMeter) -> None:
        while not self.marks[mark].wait(0.05):
            meter.tick()


def _tasks(app: rota.App, steps: int, handled: _Handled) -> tuple[Any, Any]:
    @app.task(name="work", pass_context=True)
    def work(ctx: rota.RunContext) -> None:
        for i in range(steps):  # each checkpoint committed before its step returns
            ctx.step(f"s{i}", int, i)
        handled.add()

    @app.task(name="work_returned", pass_context=True)
    def work_returned(ctx: rota.RunContext) -> Any:
        for i in range(steps - 1):
            ctx.step(f"s{i}", int, i)
        handled.add()
        return ctx.step("last", int, 1)  # returned at once: written with the run's finish

    return work, work_returned


def _fill(url: str, mode: str, runs: int, tasks_of: Any = _tasks) -> None:
    """The schema and `runs` runs of `mode`, by an app of their own (closed before the drain)."""
    app = rota.App(url, retention=None)
    try:
        app.migrate()
        tasks = tasks_of(app, STEPS.get(mode, 0), _Handled())
        tasks["returned" in mode].enqueue_many([((), {}) for _ in range(runs)])
    finally:
        app.close()


def _drain(url: str, mode: str, runs: int, args: Any, tasks: Any = _tasks) -> dict[str, float]:
    """A worker of `args.concurrency` slots draining `runs` runs of `mode`: runs per second,
    the checkpoints per batch its group commit wrote (0: none, or a rota without group
    commit), and what the drain cost (bench.durable_meter: CPU per run, statements, commits).
    `tasks`: the tasks' definitions (bench.durable_floor brings its own)."""
    _fill(url, mode, runs, tasks)
    meter = DrainMeter(url, args.mysql_url if url.startswith("mysql") else args.pg_url)
    handled = _Handled(runs // 20, runs)  # the CPU window: from the first 5 % to the last handler
    with meter.life(runs):
        app = rota.App(url, poll_interval=0.05, retention=None)
        tasks(app, STEPS.get(mode, 0), handled)
        worker = app.worker(concurrency=args.concurrency, install_signal_handlers=False)
        began = time.perf_counter()
        worker.start()
        try:
            handled.wait(runs // 20, meter)  # the CPU window opens once the worker is warm
            meter.start(handled)
            handled.wait(runs, meter)
            cpu = meter.stop(handled)
            while app.stats()["runs"].get("succeeded", 0) < runs:  # the database polled at the end only
                time.sleep(0.002)
            out = {"rate": runs / (time.perf_counter() - began), **cpu}
            commits = getattr(app.store, "_checkpoints", None)
            out["per_batch"] = commits.written / commits.batches if commits is not None and commits.batches else 0.0
        finally:
            worker.stop(wait=True, timeout=30)
            app.close()
    return {**out, **meter.counts}


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


def _median(drains: list[dict[str, float]], key: str) -> float | None:
    values = [d[key] for d in drains if key in d]
    return statistics.median(values) if values else None


def _table(store: str, args: Any, drains: dict[str, list[dict[str, float]]]) -> None:
    """The wall-time reading: runs/s, and a checkpoint's cost as the slot time it adds."""
    base = statistics.median(d["rate"] for d in drains["no-op"])
    print(f"\n{store}: {args.runs:,} runs, concurrency {args.concurrency}, {args.rounds} rounds (alternated)\n")
    print("| task | runs/s (median) | min-max | vs no-op | cost of a checkpoint (% of a no-op run) "
          "| checkpoints per batch |\n|---|--:|--:|--:|--:|--:|")  # fmt: skip
    for mode, runs in drains.items():
        rates = [d["rate"] for d in runs]
        median, steps = statistics.median(rates), STEPS[mode]
        cost = f"{100 * (base / median - 1) / steps:.0f} %" if steps else "-"
        per_batch = _median(runs, "per_batch") or 0.0
        batch = f"{per_batch:.1f}" if steps and per_batch else "-"
        print(
            f"| {mode} | {median:,.0f} | {min(rates):,.0f}-{max(rates):,.0f} | {median / base:.2f}x | {cost} | {batch} |"
        )


def _num(value: float | None, form: str = ",.0f") -> str:
    return "-" if value is None else format(value, form)


def _cost_table(store: str, drains: dict[str, list[dict[str, float]]]) -> None:
    """The resource reading: CPU per run (worker, server), statements and commits per run,
    and a checkpoint's share of a no-op run's CPU (medians of the rounds, per step)."""
    print(f"\n{store}, resources per run (medians; bench/durable_meter.py)\n")
    print("| task | worker CPU µs | server CPU µs | total CPU µs (min-max) | CPU of a checkpoint (% of a no-op run) "
          "| statements | commits | statements per checkpoint | commits per checkpoint |\n"
          "|---|--:|--:|--:|--:|--:|--:|--:|--:|")  # fmt: skip
    totals = {mode: [d["worker_us"] + d.get("server_us", 0.0) for d in runs] for mode, runs in drains.items()}
    base = statistics.median(totals["no-op"])
    stmts0, commits0 = _median(drains["no-op"], "statements"), _median(drains["no-op"], "commits")
    for mode, runs in drains.items():
        total, steps = statistics.median(totals[mode]), STEPS[mode]
        stmts, commits = _median(runs, "statements"), _median(runs, "commits")
        share = f"{100 * (total / base - 1) / steps:.0f} %" if steps else "-"
        extra = [(v - v0) / steps if steps and v is not None and v0 is not None else None
                 for v, v0 in ((stmts, stmts0), (commits, commits0))]  # fmt: skip
        print(f"| {mode} | {_num(_median(runs, 'worker_us'))} | {_num(_median(runs, 'server_us'))} "
              f"| {total:,.0f} ({min(totals[mode]):,.0f}-{max(totals[mode]):,.0f}) | {share} | {_num(stmts, '.2f')} "
              f"| {_num(commits, '.2f')} | {_num(extra[0], '+.2f')} | {_num(extra[1], '+.2f')} |")  # fmt: skip


@contextlib.contextmanager
def _scratch(store: str, args: Any) -> Iterator[str]:
    """A fresh database of `store`, named after this process (two benches on one server)."""
    admin = args.mysql_url if store == "mysql" else args.pg_url
    with scratch_store(store, admin, f"bench_durable_{os.getpid()}") as url:
        yield url


def _rounds(store: str, args: Any) -> dict[str, list[dict[str, float]]]:
    modes = [m for m in MODES if m == "no-op" or m in args.modes.split(",")]
    drains: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    for i in range(args.rounds):
        for mode in modes if i % 2 == 0 else modes[::-1]:
            with _scratch(store, args) as url:
                drains[mode].append(_drain(url, mode, args.runs, args))
    return drains


def _idle_and_resume(store: str, args: Any) -> None:
    with _scratch(store, args) as url:
        took = sorted(_resume(url, args.signals))
    p95 = took[max(0, int(len(took) * 0.95) - 1)]
    if args.parked:
        with _scratch(store, args) as url:
            empty = _idle_cpu(url, 0, args.idle)
        with _scratch(store, args) as url:
            full = _idle_cpu(url, args.parked, args.idle)
        print(
            f"\nidle worker CPU over {args.idle:g} s: {empty:.2f} % with no runs, {full:.2f} % with {args.parked:,} parked"
        )
    print(f"\nresume after a signal ({len(took)} samples, idle worker): "
          f"p50 {statistics.median(took) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.durable", description=__doc__.split("\n")[0])
    parser.add_argument("--stores", default="sqlite,postgres", help="of sqlite, postgres, mysql")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8, help="the draining worker's slots")
    parser.add_argument("--signals", type=int, default=50)
    parser.add_argument("--modes", default=",".join(MODES), help="which tasks (the no-op is always run)")
    parser.add_argument("--parked", type=int, default=0)
    parser.add_argument("--idle", type=float, default=20.0)
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--mysql-url", default=DEFAULT_MYSQL_URL)
    args = parser.parse_args(argv)
    for store in args.stores.split(","):
        drains = _rounds(store, args)
        _table(store, args, drains)
        _cost_table(store, drains)
        if args.signals:
            _idle_and_resume(store, args)


if __name__ == "__main__":
    main()
