"""An app for process-level tests: the database URL comes from ROTA_DATABASE_URL."""

from __future__ import annotations

import os
import time

import rota

app = rota.App(
    poll_interval=float(os.environ.get("ROTA_TEST_POLL", "0.05")),
    lease=float(os.environ.get("ROTA_TEST_LEASE", "3")),
    retention=None,
)


@app.task(name="noop")
def noop(i: int) -> int:
    return i


@app.task(name="sleep")
def sleep(seconds: float, tag: str = "") -> str:
    time.sleep(seconds)
    return tag


@app.task(name="sleep_async")
async def sleep_async(seconds: float) -> float:
    import asyncio

    await asyncio.sleep(seconds)
    return seconds


@app.task(name="record", pass_context=True)
def record(ctx: rota.RunContext, i: int, seconds: float = 0.0) -> dict[str, int]:
    """Log 'start' and 'end' lines (run id, attempt, token, pid) to ROTA_TEST_LOG; return the
    token so a test can check the stored result came from the attempt that holds the run."""
    _log(f"start {ctx.run_id} {ctx.attempt} {ctx.token} {os.getpid()} {i}")
    if seconds:
        time.sleep(seconds)
    _log(f"end {ctx.run_id} {ctx.attempt} {ctx.token} {os.getpid()} {i}")
    return {"i": i, "token": ctx.token}


def _log(line: str) -> None:
    path = os.environ.get("ROTA_TEST_LOG")
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@app.task(name="chaos", pass_context=True, retries=100, backoff=0)
def chaos(ctx: rota.RunContext, i: int, seconds: float) -> dict[str, int]:
    """Like record, with attempts to spare: kill -9 tests lose attempts on purpose."""
    return record.fn(ctx, i, seconds)  # type: ignore[no-any-return]


# 3 s: a child that starts slowly on a loaded machine (parallel suite) must still write its pid
# before the timeout kills it, or the test cannot check that the kill happened.
@app.task(name="hang_isolated", isolation="process", timeout=3.0)
def hang_isolated(pid_file: str) -> None:
    with open(pid_file, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(60)


if os.environ.get("ROTA_TEST_RELEASE") == "2":  # the next release adds a task (rolling deploys)

    @app.task(name="added", pass_context=True)
    def added(ctx: rota.RunContext, i: int) -> dict[str, int]:
        return record.fn(ctx, i, 0.0)  # type: ignore[no-any-return]


@app.task(name="durable", pass_context=True, retries=3, backoff=0)
def durable(ctx: rota.RunContext, hang: float) -> list[str]:
    """Steps 'one' and 'two' (each logs `step NAME run attempt pid`), 'two' hanging `hang`
    seconds on the first attempt (a kill -9 test kills its worker there), then 'three'."""

    def step(name: str, seconds: float = 0.0) -> str:
        _log(f"step {name} {ctx.run_id} {ctx.attempt} {os.getpid()}")
        time.sleep(seconds)
        return name

    return [
        ctx.step("one", step, "one"),
        ctx.step("two", step, "two", hang if ctx.attempt == 1 else 0.0),
        ctx.step("three", step, "three"),
    ]


@app.task(name="durable_async", pass_context=True, retries=3, backoff=0)
async def durable_async(ctx: rota.RunContext, hang: float) -> list[str]:
    """As `durable`, async: step 'two' awaits `hang` seconds until its run was handed back once."""
    import asyncio

    async def step(name: str, seconds: float = 0.0) -> str:
        _log(f"step {name} {ctx.run_id} {ctx.attempt} {os.getpid()}")
        await asyncio.sleep(seconds)
        return name

    first = await ctx.step_async("one", step, "one")
    handed = os.environ.get("ROTA_TEST_HANG") == "1"
    second = await ctx.step_async("two", step, "two", hang if handed else 0.0)
    return [first, second, await ctx.step_async("three", step, "three")]
