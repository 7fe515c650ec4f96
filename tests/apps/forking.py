"""An app whose handler forks a helper that outlives its worker (tests/test_sqlite_writers.py).

`fork_then_write(how, report)` on its first attempt forks a child that sleeps a minute
(`how`: "os" for os.fork, "multiprocessing" for a "fork" context Process), writes the child's
pid to `report`, then holds a write transaction of the worker's store until the worker is
killed: a worker killed in the middle of a write. Later attempts return at once."""

from __future__ import annotations

import multiprocessing
import os
import time

import rota

app = rota.App(retention=None)


def _fork(how: str) -> int:
    if how == "multiprocessing":
        child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
        child.start()
        assert child.pid is not None
        return child.pid
    pid = os.fork()
    if pid == 0:  # the helper: outlives its worker, holding what it inherited
        time.sleep(60)
        os._exit(0)
    return pid


@app.task(name="fork_then_write", pass_context=True, retries=1, backoff=0)
def fork_then_write(ctx: rota.RunContext, how: str, report: str) -> int:
    if ctx.attempt > 1:
        return ctx.attempt
    pid = _fork(how)
    with app.store._tx():  # type: ignore[attr-defined]
        with open(report + ".tmp", "w") as f:
            f.write(str(pid))
        os.rename(report + ".tmp", report)
        time.sleep(60)  # killed here, in the middle of a write
    return ctx.attempt
