"""Where a late tick's time goes on MySQL/MariaDB (issue 42 item 4): `--workers` worker
processes (one by default), an every-second schedule on a scratch `bench_tick_why_<pid>`
database; each process times its store's tick and claim calls (claim_ahead, claim,
poll_after_claim, materialize, due_schedules, poll_state) and records, per tick it ran, the
run's id and its start. For each tick, which process made it (materialize), which claimed it
and when (relative to the tick), and its lateness; for each tick that started more than 5 ms
late, every process's calls from 400 ms before it to its start (process, call, send time
relative to the tick, duration ms, rows returned).

    python -m bench.tick_why [--ticks 40] [--workers 2] [--mysql-url mysql://root@127.0.0.1:3306/mysql]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import rota
from bench.dbs import _mysql_ddl, _with_db

TIMED = ("claim_ahead", "claim", "poll_after_claim", "materialize", "due_schedules", "poll_state")


def _rows(result: Any) -> Any:
    if isinstance(result, list):
        return [getattr(r, "id", None) for r in result] if result and hasattr(result[0], "id") else len(result)
    return result if isinstance(result, bool) else None


def _timed(store: Any, sink: list[list[Any]]) -> None:
    for name in TIMED:
        method = getattr(store, name)

        def wrapped(*args: Any, _method: Any = method, _name: str = name, **kwargs: Any) -> Any:
            began = time.time()
            result = _method(*args, **kwargs)
            sink.append([_name, began, (time.time() - began) * 1000, _rows(result)])
            return result

        setattr(store, name, wrapped)


def _worker(url: str, index: int, out: str, done: Any, stop: Any) -> None:
    """One worker process: its ticks and timed calls written to `out` as JSON once `stop` is set."""
    app = rota.App(url)
    ticks: list[list[Any]] = []
    calls: list[list[Any]] = []

    @app.schedule(every=timedelta(seconds=1), name="tick", pass_context=True)
    def tick(ctx: Any) -> None:
        ticks.append([int(ctx.run_id), ctx.scheduled_for.timestamp(), time.time()])
        with done.get_lock():
            done.value += 1

    _timed(app.store, calls)
    worker = app.worker(install_signal_handlers=False)
    worker.start()
    stop.wait()
    worker.stop(wait=True, timeout=10)
    app.close()
    Path(out).write_text(json.dumps({"index": index, "ticks": ticks, "calls": calls}))


def _made_by(tick: float, procs: list[dict[str, Any]]) -> str:
    """Which process wrote the tick's run ahead (a materialize that returned True within 1 s before)."""
    made = [(c[1], p["index"]) for p in procs for c in p["calls"] if c[0] == "materialize" and c[3] is True]
    near = [i for at, i in made if tick - 1.0 < at < tick]
    return ",".join(str(i) for i in near) or "?"


def _claimed_by(run_id: int, procs: list[dict[str, Any]], tick: float) -> str:
    for p in procs:
        for name, at, took, rows in p["calls"]:
            if name in ("claim_ahead", "claim") and isinstance(rows, list) and run_id in rows:
                return f"w{p['index']} {name} sent {(at - tick) * 1000:+.1f} took {took:.1f}"
    return "?"


def _report(procs: list[dict[str, Any]], dropped: int) -> None:
    ticks = sorted((t for p in procs for t in ([*t, p["index"]] for t in p["ticks"])), key=lambda t: t[1])[dropped:]
    ms = sorted((started - due) * 1000 for _, due, started, _ in ticks)
    print(
        f"{len(ms)} ticks; lateness ms: p50 {statistics.median(ms):.1f}, p95 {ms[int(0.95 * len(ms)) - 1]:.1f}, max {ms[-1]:.1f}"
    )
    for name in TIMED:
        took = sorted(c[2] for p in procs for c in p["calls"] if c[0] == name)
        if took:
            print(f"  {name} ms (n={len(took)}): p50 {statistics.median(took):.1f}, max {took[-1]:.1f}")
    for run_id, due, started, index in ticks:
        late = (started - due) * 1000
        print(
            f"tick {run_id}: ran on w{index}, {late:.1f} ms late; made by w{_made_by(due, procs)}; claimed: {_claimed_by(run_id, procs, due)}"
        )
        if late > 5:
            for p in procs:
                near = [(n, round((t - due) * 1000, 1), round(d, 1), k if not isinstance(k, list) else len(k))
                        for n, t, d, k in p["calls"] if -0.4 < t - due < late / 1000 + 0.05]  # fmt: skip
                print(f"    w{p['index']}: {sorted(near, key=lambda c: c[1])}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tick_why", description=__doc__.split("\n")[0])
    parser.add_argument("--ticks", type=int, default=40)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--dump", help="also write every process's ticks and calls here (JSON)")
    parser.add_argument("--mysql-url", default=os.environ.get("BENCH_MYSQL_URL", "mysql://root@127.0.0.1:3306/mysql"))
    args = parser.parse_args()
    name = f"bench_tick_why_{os.getpid()}"
    _mysql_ddl(args.mysql_url, f"DROP DATABASE IF EXISTS `{name}`", f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    url = _with_db(args.mysql_url, name)
    app = rota.App(url)
    app.migrate()
    app.close()
    spawn = mp.get_context("spawn")
    done, stop = spawn.Value("i", 0), spawn.Event()
    with tempfile.TemporaryDirectory() as tmp:
        outs = [str(Path(tmp) / f"w{i}.json") for i in range(args.workers)]
        children = [spawn.Process(target=_worker, args=(url, i, outs[i], done, stop)) for i in range(args.workers)]
        try:
            for child in children:
                child.start()
            while done.value < args.ticks + 2:
                time.sleep(0.1)
        finally:
            stop.set()
            for child in children:
                child.join(30)
            _mysql_ddl(args.mysql_url, f"DROP DATABASE IF EXISTS `{name}`")
        procs = [json.loads(Path(out).read_text()) for out in outs]
    if args.dump:
        Path(args.dump).write_text(json.dumps(procs))
    _report(procs, 2)  # the first two: the workers starting


if __name__ == "__main__":
    main()
