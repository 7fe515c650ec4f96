"""A worker's background roles (poll, heartbeat, ticks, wake-ups, maintenance, ...) are
supervised: one that dies of an unexpected exception is logged and started again, so a worker
never goes on claiming without, say, making ticks or renewing leases."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from typing import Any

import pytest

import rota

from .conftest import WITH_MYSQL, store_url, wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def test_a_role_that_dies_is_logged_and_started_again(app: rota.App, caplog: pytest.LogCaptureFixture) -> None:
    ticks: list[int] = []
    app.schedule(every=1, name="often", run_immediately=True)(lambda: ticks.append(1))
    worker = app.worker(install_signal_handlers=False, poll_interval=0.05)
    real = worker._ticker.run
    starts: list[int] = []

    async def dies_first(*args: Any) -> None:
        starts.append(1)
        if len(starts) == 1:
            raise RuntimeError("the ticker broke")
        await real(*args)

    worker._ticker.run = dies_first  # type: ignore[method-assign]
    caplog.set_level(logging.ERROR, "rota.worker")
    worker.start()
    wait_for(lambda: len(ticks) >= 1, what="ticks after the ticker's restart")
    assert len(starts) == 2
    assert any("rota-ticks role failed; restarting it" in r.getMessage() for r in caplog.records)
    assert any(r.exc_info and "the ticker broke" in str(r.exc_info[1]) for r in caplog.records)
    worker.stop(wait=True, timeout=10)


def test_a_role_failing_again_and_again_waits_longer_each_time(caplog: pytest.LogCaptureFixture) -> None:
    """Not a restart every second forever, each with a traceback: the pause doubles (up to a
    minute) and only the first failure in a row carries the traceback."""
    import asyncio

    from rota.worker.service import supervise

    failures: list[float] = []

    async def body() -> None:
        failures.append(asyncio.get_running_loop().time())
        if len(failures) < 4:
            raise RuntimeError(f"broken {len(failures)}")

    caplog.set_level(logging.ERROR, "rota.worker")
    asyncio.run(supervise(body, "the test role", pause=0.02))
    gaps = [b - a for a, b in itertools.pairwise(failures)]
    assert len(failures) == 4 and gaps[1] >= 0.04 and gaps[2] >= 0.08  # 0.02, then doubled
    records = [r for r in caplog.records if "the test role failed" in r.getMessage()]
    assert [bool(r.exc_info) for r in records] == [True, False, False]
    assert "failed again (RuntimeError: broken 3); restarting it in 0.1 s" in records[2].getMessage()
