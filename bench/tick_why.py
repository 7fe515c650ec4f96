"""Where a late tick's time goes on MySQL/MariaDB (issue 42 item 4): one worker in this
process, an every-second schedule on a scratch `bench_tick_why_<pid>` database; the store's
claim_ahead, claim, materialize and poll_state calls are timed, and for each tick that
started more than 5 ms late the calls from 400 ms before it to its start are printed
(send time relative to the tick, duration, runs claimed).

    python -m bench.tick_why [--ticks 40] [--mysql-url mysql://root@127.0.0.1:3306/mysql]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import timedelta
from typing import Any

import rota
from bench.dbs import _mysql_ddl, _with_db

Call = tuple[str, float, float, Any]


def _timed(store: Any, sink: list[Call]) -> None:
    for name in ("claim_ahead", "claim", "materialize", "poll_state"):
        method = getattr(store, name)

        def wrapped(*args: Any, _method: Any = method, _name: str = name, **kwargs: Any) -> Any:
            began = time.time()
            result = _method(*args, **kwargs)
            sink.append((_name, began, (time.time() - began) * 1000, len(result) if isinstance(result, list) else None))
            return result

        setattr(store, name, wrapped)


def _report(late: list[tuple[float, float]], calls: list[Call]) -> None:
    ms = sorted(lateness for lateness, _ in late)
    print(f"lateness ms: p50 {statistics.median(ms):.1f}, p95 {ms[int(0.95 * len(ms)) - 1]:.1f}, max {ms[-1]:.1f}")
    ahead = sorted(took for name, _, took, _ in calls if name == "claim_ahead")
    if ahead:
        print(f"claim_ahead ms (n={len(ahead)}): p50 {statistics.median(ahead):.1f}, max {ahead[-1]:.1f}")
    for lateness, tick in late:
        if lateness > 5:
            near = [
                (n, round((t - tick) * 1000, 1), round(d, 1), k)
                for n, t, d, k in calls
                if -0.4 < t - tick < lateness / 1000 + 0.05
            ]
            print(f"{lateness:.1f} ms late: {sorted(near, key=lambda c: c[1])}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tick_why", description=__doc__.split("\n")[0])
    parser.add_argument("--ticks", type=int, default=40)
    parser.add_argument("--mysql-url", default=os.environ.get("BENCH_MYSQL_URL", "mysql://root@127.0.0.1:3306/mysql"))
    args = parser.parse_args()
    name = f"bench_tick_why_{os.getpid()}"
    _mysql_ddl(args.mysql_url, f"DROP DATABASE IF EXISTS `{name}`", f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    app = rota.App(_with_db(args.mysql_url, name))
    late: list[tuple[float, float]] = []
    calls: list[Call] = []

    @app.schedule(every=timedelta(seconds=1), name="tick", pass_context=True)
    def tick(ctx: Any) -> None:
        late.append(((time.time() - ctx.scheduled_for.timestamp()) * 1000, ctx.scheduled_for.timestamp()))

    app.migrate()
    _timed(app.store, calls)
    worker = app.worker(install_signal_handlers=False)
    worker.start()
    try:
        while len(late) < args.ticks + 2:
            time.sleep(0.1)
    finally:
        worker.stop(wait=True, timeout=10)
        app.close()
        _mysql_ddl(args.mysql_url, f"DROP DATABASE IF EXISTS `{name}`")
    _report(late[2:], calls)  # the first two: the worker starting


if __name__ == "__main__":
    main()
