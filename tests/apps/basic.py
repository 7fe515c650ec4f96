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
