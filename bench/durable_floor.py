"""Issue 43: the floor of a step checkpoint that commits before `ctx.step` returns, on
PostgreSQL, against a no-op run (is "≤ 30 % of a no-op run" reachable at all?).

1. Drains (bench.durable's, alternated rounds, a fresh database each): the no-op task; a task
   whose handler makes the cheapest durable checkpoint there is from its thread (`bare
   insert`: one autocommit INSERT on a connection of its own, taken from a queue of
   connections opened before the drain); rota's `1 step` (`ctx.step`); and, as a control, a
   handler that blocks its slot `--sleep` ms without the database (what a blocking handler
   costs the worker, checkpoint or not). Per run: worker
   CPU, PostgreSQL backends' CPU, statements and commits (bench/durable_meter.py), the slot
   time per run (concurrency / runs per second), and the checkpoint's share of a no-op run's
   CPU and slot time.
2. The checkpoint alone (no worker; a fresh database; `--iterations` checkpoints each), per
   checkpoint: this process's CPU, its backends' CPU, and the latency of one call (p50):
   (a) one autocommit INSERT (the commit is the statement's), and BEGIN / INSERT / COMMIT,
   from 1 thread and from `--threads` threads, each on its own connection;
   (b) one INSERT of N rows and its commit (N checkpoints sharing one commit: group commit at
   its cheapest, one thread, no hand-off), per checkpoint;
   (c) rota's checkpoint, `Durable.step` on a claimed run (its group commit, its fence), from
   1 thread and from `--threads` threads (one run each).
   The shares divide by the no-op run's median total CPU and slot time from (1).

    python -m bench.durable_floor [--rounds 3] [--runs 1000] [--concurrency 8]
                                  [--iterations 2000] [--threads 8] [--batch 4,8] [--sleep 1]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

import rota
from bench import durable
from bench.cpu import cpu_ns_of, db_backends
from bench.dbs import DEFAULT_PG_URL, scratch_store

TABLE = "CREATE TABLE floor_steps (run_id bigint, name text, result text, PRIMARY KEY (run_id, name))"
INSERT = "INSERT INTO floor_steps (run_id, name, result) VALUES (%s, %s, %s)"
DRAINS = ("no-op", "sleep", "bare insert", "1 step")
Op = Callable[[int], int]  # one call: makes checkpoints (k: the call's number), returns how many


# -- drains ----------------------------------------------------------------------------------
class _Conns:
    """Connections opened before the drain (a handler takes one, inserts, gives it back)."""

    def __init__(self, url: str, n: int) -> None:
        self.free: queue.SimpleQueue[psycopg.Connection[Any]] = queue.SimpleQueue()
        self.all = [psycopg.connect(url, autocommit=True) for _ in range(n)]
        for conn in self.all:
            self.free.put(conn)

    def close(self) -> None:
        for conn in self.all:
            conn.close()


def _bare_tasks(conns: _Conns) -> Callable[..., tuple[Any, Any]]:
    def tasks(app: rota.App, steps: int, handled: Any) -> tuple[Any, Any]:
        @app.task(name="work", pass_context=True)
        def work(ctx: rota.RunContext) -> None:
            conn = conns.free.get()
            try:  # the cheapest durable checkpoint: one statement, committed by autocommit
                conn.execute(INSERT, (ctx.run_id, "s0", "0"), prepare=True)
            finally:
                conns.free.put(conn)
            handled.add()

        return work, work

    return tasks


def _sleep_tasks(seconds: float) -> Callable[..., tuple[Any, Any]]:
    def tasks(app: rota.App, steps: int, handled: Any) -> tuple[Any, Any]:
        @app.task(name="work")
        def work() -> None:
            time.sleep(seconds)  # blocks its slot as a commit would, no database
            handled.add()

        return work, work

    return tasks


def _drain(mode: str, args: Any) -> dict[str, float]:
    with scratch_store("postgres", args.pg_url, f"bench_floor_{os.getpid()}") as url:
        if mode == "sleep":
            return durable._drain(url, mode, args.runs, args, tasks=_sleep_tasks(args.sleep / 1000))
        if mode != "bare insert":
            return durable._drain(url, mode, args.runs, args)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(TABLE)
        conns = _Conns(url, args.concurrency)
        try:
            return durable._drain(url, mode, args.runs, args, tasks=_bare_tasks(conns))
        finally:
            conns.close()


def _drains(args: Any) -> dict[str, list[dict[str, float]]]:
    out: dict[str, list[dict[str, float]]] = {mode: [] for mode in DRAINS}
    for i in range(args.rounds):
        for mode in DRAINS if i % 2 == 0 else DRAINS[::-1]:
            out[mode].append(_drain(mode, args))
    return out


# -- the checkpoint alone --------------------------------------------------------------------
def _insert_ops(url: str, threads: int, autocommit: bool, opened: list[Any]) -> list[Op]:
    def make(t: int) -> Op:
        conn = psycopg.connect(url, autocommit=autocommit)
        opened.append(conn)

        def op(k: int) -> int:
            conn.execute(INSERT, (t + 1, f"s{k}", "0"), prepare=True)
            if not autocommit:
                conn.commit()
            return 1

        return op

    return [make(t) for t in range(threads)]


def _batch_ops(url: str, n: int, opened: list[Any]) -> list[Op]:
    conn = psycopg.connect(url, autocommit=True)
    opened.append(conn)
    query = "INSERT INTO floor_steps (run_id, name, result) VALUES " + ", ".join(["(%s, %s, %s)"] * n)

    def op(k: int) -> int:
        conn.execute(query, [v for j in range(n) for v in (1, f"s{k}.{j}", "0")], prepare=True)
        return n

    return [op]


def _rota_ops(url: str, threads: int, opened: list[Any]) -> list[Op]:
    from rota.durable import Durable

    app = rota.App(url, retention=None)
    opened.append(app)
    app.migrate()
    held = app.task(name="held")(lambda: None)
    for _ in range(threads):
        held.enqueue()
    claims = app.store.claim("floor", threads, None, 3600.0, threads)

    def make(claim: Any) -> Op:
        box: list[Any] = []

        def op(k: int) -> int:
            if not box or k % 900 == 0:  # (rota.durable.MAX_STEPS per execution: a fresh view, names go on)
                box[:] = [Durable(app.store, claim.id, claim.token, "held", steps=False)]
            box[0].step(f"s{k}", int, (k,), {})
            return 1

        return op

    return [make(c) for c in claims]


def _measure(url: str, ops: list[Op], iterations: int) -> dict[str, float]:
    """Run every op's calls at once (a thread each), `iterations` calls in all after 20 each to
    warm up; per checkpoint: process CPU, backends' CPU; the p50 latency of one call."""
    for op in ops:
        for k in range(20):
            op(10**6 + k)
    per = max(1, iterations // len(ops))
    took: list[list[float]] = [[] for _ in ops]
    made = [0] * len(ops)

    def body(i: int) -> None:
        for k in range(per):
            t0 = time.perf_counter()
            made[i] += ops[i](k)
            took[i].append(time.perf_counter() - t0)

    backends = db_backends(url.rpartition("/")[2])
    server0, cpu0 = cpu_ns_of(backends), time.process_time()
    workers = [threading.Thread(target=body, args=(i,)) for i in range(len(ops))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    cpu, server = time.process_time() - cpu0, cpu_ns_of(backends)
    n = sum(made)
    return {
        "worker_us": 1e6 * cpu / n,
        "server_us": 1e6 * sum(v - server0.get(p, v) for p, v in server.items()) / n,
        "p50_ms": 1e3 * statistics.median(t for ts in took for t in ts),
    }


def _alone(args: Any) -> list[tuple[str, int, int, dict[str, float]]]:
    """(label, threads, checkpoints per commit, figures), each on a fresh database."""
    cases: list[tuple[str, int, int, Callable[[str, list[Any]], list[Op]]]] = []
    for threads in sorted({1, args.threads}):
        cases.append(("(a) autocommit INSERT", threads, 1, lambda u, o, t=threads: _insert_ops(u, t, True, o)))
        cases.append(("(a) BEGIN, INSERT, COMMIT", threads, 1, lambda u, o, t=threads: _insert_ops(u, t, False, o)))
    for n in (int(b) for b in args.batch.split(",")):
        cases.append(("(b) one INSERT of N rows", 1, n, lambda u, o, n=n: _batch_ops(u, n, o)))
    for threads in sorted({1, args.threads}):
        cases.append(("(c) rota Durable.step", threads, 0, lambda u, o, t=threads: _rota_ops(u, t, o)))
    out = []
    for label, threads, rows, make in cases:
        with scratch_store("postgres", args.pg_url, f"bench_floor_{os.getpid()}") as url:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(TABLE)
            opened: list[Any] = []
            try:
                out.append((label, threads, rows, _measure(url, make(url, opened), args.iterations)))
            finally:
                for thing in opened:
                    thing.close()
    return out


# -- report ----------------------------------------------------------------------------------
def _slot_ms(d: dict[str, float], concurrency: int) -> float:
    return 1e3 * concurrency / d["rate"]


def _report(args: Any, drains: dict[str, list[dict[str, float]]], alone: list[Any]) -> None:
    med = statistics.median
    total = {m: [d["worker_us"] + d.get("server_us", 0.0) for d in ds] for m, ds in drains.items()}
    slot = {m: [_slot_ms(d, args.concurrency) for d in ds] for m, ds in drains.items()}
    cpu0, slot0 = med(total["no-op"]), med(slot["no-op"])
    print(f"\npostgres: drains of {args.runs:,} runs, concurrency {args.concurrency}, {args.rounds} rounds "
          "(alternated); medians (min-max)\n")  # fmt: skip
    print("| task | runs/s | slot time per run, ms | worker CPU µs | server CPU µs | total CPU µs "
          "| checkpoint's CPU, % of a no-op run | checkpoint's slot time, % of a no-op run | statements | commits |\n"
          "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")  # fmt: skip
    for mode, ds in drains.items():
        c, s = med(total[mode]), med(slot[mode])
        label = f"sleep {args.sleep:g} ms" if mode == "sleep" else mode
        share = "-" if mode == "no-op" else f"{100 * (c - cpu0) / cpu0:.0f} %"
        wall = "-" if mode == "no-op" else f"{100 * (s - slot0) / slot0:.0f} %"
        print(f"| {label} | {med(d['rate'] for d in ds):,.0f} | {s:.2f} ({min(slot[mode]):.2f}-{max(slot[mode]):.2f}) "
              f"| {med(d['worker_us'] for d in ds):,.0f} | {med(d.get('server_us', 0.0) for d in ds):,.0f} "
              f"| {c:,.0f} ({min(total[mode]):,.0f}-{max(total[mode]):,.0f}) | {share} | {wall} "
              f"| {med(d.get('statements', 0.0) for d in ds):.2f} | {med(d.get('commits', 0.0) for d in ds):.2f} |")  # fmt: skip
    print(f"\npostgres: one checkpoint alone, {args.iterations:,} per case; shares of the no-op run above "
          f"({cpu0:,.0f} µs of CPU, {slot0:.2f} ms of slot time)\n")  # fmt: skip
    print("| checkpoint | threads | checkpoints per commit | worker CPU µs | server CPU µs | total CPU µs "
          "| % of a no-op run's CPU | latency of a call, p50 ms | % of a no-op run's slot time |\n"
          "|---|--:|--:|--:|--:|--:|--:|--:|--:|")  # fmt: skip
    for label, threads, rows, f in alone:
        c = f["worker_us"] + f["server_us"]
        print(f"| {label} | {threads} | {rows or 'batched'} | {f['worker_us']:,.0f} | {f['server_us']:,.0f} | {c:,.0f} "
              f"| {100 * c / cpu0:.0f} % | {f['p50_ms']:.2f} | {100 * f['p50_ms'] / slot0:.0f} % |")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.durable_floor", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=8, help="threads for the contended cases of (a) and (c)")
    parser.add_argument("--batch", default="4,8", help="rows per commit for (b)")
    parser.add_argument("--sleep", type=float, default=1.0, help="ms the `sleep` task blocks its slot")
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--json", help="also write the raw figures here")
    args = parser.parse_args(argv)
    args.mysql_url = None
    drains = _drains(args)
    alone = _alone(args)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"drains": drains, "alone": alone}, out)
    _report(args, drains, alone)


if __name__ == "__main__":
    main()
