"""The worker app of the fault scenarios: `python -m rota worker tests.faults.app:app`.

The database URL comes from ROTA_DATABASE_URL. Every execution appends JSON lines to
ROTA_TEST_LOG ("start" and "end", with the run, attempt, fencing token, pid, schedule, tick
and a time.time() stamp; "end" also has the returned value), one os.write per line on an
O_APPEND descriptor so lines of several processes never interleave. invariants.py reads it.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import rota

app = rota.App(
    poll_interval=float(os.environ.get("ROTA_TEST_POLL", "0.05")),
    lease=float(os.environ.get("ROTA_TEST_LEASE", "2")),
    retention=None,
)


def log(event: str, ctx: rota.RunContext, **extra: Any) -> None:
    path = os.environ.get("ROTA_TEST_LOG")
    if not path:
        return
    line = {
        "event": event,
        "run": str(ctx.run_id),
        "attempt": ctx.attempt,
        "token": ctx.token,
        "pid": os.getpid(),
        "schedule": ctx.schedule,
        "tick": ctx.scheduled_for.isoformat(),
        "t": time.time(),
        **extra,
    }
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


@app.task(name="faults.rec", pass_context=True, retries=20, backoff=0)
def rec(ctx: rota.RunContext, i: int, seconds: float = 0.0) -> dict[str, int]:
    """Record the execution, sleep, return the run's token (so the stored result shows which
    attempt wrote it)."""
    log("start", ctx)
    if seconds:
        time.sleep(seconds)
    result = {"i": i, "token": ctx.token}
    log("end", ctx, result=result)
    return result


WEIRD = {
    "surrogate": "file-\udcff.txt",  # what os.fsdecode gives for a non-UTF-8 file name
    "nul": "a\x00b",  # PostgreSQL text cannot hold NUL
}


@app.task(name="faults.weird", pass_context=True)
def weird(ctx: rota.RunContext, kind: str, i: int) -> Any:
    """Return (or raise with) an unencodable value of `kind`; "plain" returns a normal one."""
    log("start", ctx)
    if kind == "plain":
        result: Any = {"i": i, "token": ctx.token}
        log("end", ctx, result=result)
        return result
    if kind.startswith("raise-"):
        log("end", ctx, raised=True)
        raise ValueError(f"cannot open {WEIRD[kind.removeprefix('raise-')]}")
    log("end", ctx, weird=kind)
    return WEIRD[kind]


@app.task(name="faults.tx", pass_context=True, transactional=True, retries=20, backoff=0)
def tx(ctx: rota.RunContext, i: int) -> int:
    """A transactional handler that writes nothing of its own (its success is the write);
    logs nothing: a failed commit is retried, which the execution log would count twice."""
    ctx.connection.execute("SELECT 1")
    return i


@app.task(name="faults.limited", pass_context=True, retries=20, backoff=0, limit=rota.Limit(2, by="key"))
def limited(ctx: rota.RunContext, key: str, i: int, seconds: float = 0.0) -> dict[str, int]:
    """As rec, at most 2 running at once per `key` (flow-control scenarios)."""
    return rec.fn(ctx, i, seconds)  # type: ignore[no-any-return]


@app.task(name="faults.rated", pass_context=True, retries=20, backoff=0, rate=rota.Rate(3, per=1, name="faults"))
def rated(ctx: rota.RunContext, i: int, seconds: float = 0.0) -> dict[str, int]:
    """As rec, at most 3 starts in any second across every worker."""
    return rec.fn(ctx, i, seconds)  # type: ignore[no-any-return]
