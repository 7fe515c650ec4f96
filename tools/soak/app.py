"""The soak's tasks, declared on any App by `declare(app)`; `app` here is what the soak's
worker processes run (`rota worker tools.soak.app:app`, the URL from ROTA_DATABASE_URL).

Every handler appends its evidence to `evidence-<pid>.jsonl` in ROTA_SOAK_DIR: a "start" line
when it begins and an "end" line when it returns or raises, each with the run, attempt,
fencing token, task, limit key, schedule, tick and both clocks (CLOCK_MONOTONIC is one clock
for every process of the machine, so intervals of several processes compare). One os.write
per line on an O_APPEND descriptor, outside rota's transaction, so a line survives anything
the worker does afterwards. What a handler does (how long it sleeps, whether it fails) is
drawn from the soak's seed and the run id, so a replay makes the same choices.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import sqlite3
import time
from typing import Any

import rota

SEED = int(os.environ.get("ROTA_SOAK_SEED", "0"))
LIMIT = 2  # soak.limited: at most 2 running at once per key
RATE = (3, 1.0)  # soak.rated: at most 3 starts in any second
RETRIES = 2  # soak.plain; a run with fail_until > RETRIES fails for good (retry_many's food)


class SoakFailure(Exception):
    """A failure the workload asked for (the only error a handler raises)."""


def record(event: str, ctx: rota.RunContext, task: str, **extra: Any) -> None:
    folder = os.environ.get("ROTA_SOAK_DIR")
    if not folder:
        return
    line = {
        "e": event, "run": str(ctx.run_id), "attempt": ctx.attempt, "token": ctx.token, "task": task,
        "pid": os.getpid(), "schedule": ctx.schedule, "tick": ctx.scheduled_for.isoformat(),
        "mono": time.monotonic(), "wall": time.time(), **extra,
    }  # fmt: skip
    fd = os.open(os.path.join(folder, f"evidence-{os.getpid()}.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def choice(ctx: rota.RunContext) -> random.Random:
    """The seeded choices of this attempt."""
    return random.Random(f"{SEED}:{ctx.run_id}:{ctx.attempt}")


def work(
    ctx: rota.RunContext, task: str, seconds: float, fail_until: int = 0, key: str | None = None
) -> dict[str, Any]:
    """Record, sleep (a blocking handler), fail while attempt <= fail_until, record the end."""
    record("start", ctx, task, key=key)
    try:
        if seconds > 0:
            time.sleep(seconds * (0.5 + choice(ctx).random()))
        if ctx.attempt <= fail_until:
            raise SoakFailure(f"asked to fail attempt {ctx.attempt} of run {ctx.run_id}")
    except BaseException as exc:
        record("end", ctx, task, key=key, ok=False, error=type(exc).__name__)
        raise
    record("end", ctx, task, key=key, ok=True)
    return {"token": ctx.token}


def fork_helper(seconds: float, how: str) -> None:
    """A short-lived child, as a library that forks would make (multiprocessing or os.fork)."""
    if how == "mp":
        child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(seconds,))
        child.start()
        child.join()
        return
    pid = os.fork()
    if pid == 0:  # the child: sleep and leave without running the parent's cleanup
        time.sleep(seconds)
        os._exit(0)
    os.waitpid(pid, 0)


def insert_effect(connection: Any, run_id: str, token: int) -> None:
    """The transactional handler's own row, in rota's transaction (soak_effects)."""
    mark = "?" if isinstance(connection, sqlite3.Connection) else "%s"
    connection.execute(f"INSERT INTO soak_effects (run_id, token) VALUES ({mark}, {mark})", (run_id, token))


def declare(app: rota.App) -> None:
    """Declare the soak's tasks on `app` (the workers' app and the driver's client)."""

    @app.task(name="soak.plain", pass_context=True, retries=RETRIES, backoff=0.1)
    def plain(ctx: rota.RunContext, i: int, seconds: float = 0.1, fail_until: int = 0) -> dict[str, Any]:
        return work(ctx, "soak.plain", seconds, fail_until)

    @app.task(name="soak.limited", pass_context=True, retries=5, backoff=0.1, limit=rota.Limit(LIMIT, by="key"))
    def limited(ctx: rota.RunContext, key: str, i: int, seconds: float = 0.3) -> dict[str, Any]:
        return work(ctx, "soak.limited", seconds, key=key)

    @app.task(name="soak.rated", pass_context=True, retries=5, backoff=0.1, rate=rota.Rate(RATE[0], per=RATE[1]))
    def rated(ctx: rota.RunContext, i: int) -> dict[str, Any]:
        return work(ctx, "soak.rated", 0.02)

    # the two whose stored limit and rate the damage fault puts out of range (tools/soak/damage.py)
    @app.task(name="soak.capped", pass_context=True, limit=rota.Limit(1))
    def capped(ctx: rota.RunContext, i: int) -> dict[str, Any]:
        return work(ctx, "soak.capped", 0.05)

    @app.task(name="soak.paced", pass_context=True, rate=rota.Rate(2, per=1.0))
    def paced(ctx: rota.RunContext, i: int) -> dict[str, Any]:
        return work(ctx, "soak.paced", 0.05)

    @app.task(name="soak.txn", transactional=True, retries=1, backoff=0.1)
    def txn(ctx: rota.RunContext, i: int, fail_until: int = 0) -> dict[str, Any]:
        record("start", ctx, "soak.txn")
        try:
            insert_effect(ctx.connection, str(ctx.run_id), ctx.token)
            if ctx.attempt <= fail_until:
                raise SoakFailure(f"asked to fail attempt {ctx.attempt} of run {ctx.run_id}")
        except BaseException as exc:
            record("end", ctx, "soak.txn", ok=False, error=type(exc).__name__)
            raise
        record("end", ctx, "soak.txn", ok=True)
        return {"token": ctx.token}

    @app.task(name="soak.fork", pass_context=True, retries=2, backoff=0.1)
    def fork(ctx: rota.RunContext, i: int, child_seconds: float, how: str) -> dict[str, Any]:
        record("start", ctx, "soak.fork")
        fork_helper(child_seconds, how)
        record("end", ctx, "soak.fork", ok=True)
        return {"token": ctx.token}

    @app.task(name="soak.tick", pass_context=True, retries=1, backoff=0.1)
    def tick(ctx: rota.RunContext, seconds: float) -> dict[str, Any]:
        return work(ctx, "soak.tick", seconds)

    @app.task(name="soak.unique", pass_context=True)
    def unique(ctx: rota.RunContext, key: str) -> dict[str, Any]:
        return work(ctx, "soak.unique", 0.05)

    del plain, limited, rated, capped, paced, txn, fork, tick, unique


app = rota.App(
    poll_interval=float(os.environ.get("ROTA_SOAK_POLL", "0.1")),
    lease=float(os.environ.get("ROTA_SOAK_LEASE", "4")),
    retention=None,
)
declare(app)
