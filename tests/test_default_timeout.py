"""A default timeout for runs whose task sets none (issue 44, item 7): `App(default_timeout=)`,
`rota worker --default-timeout`, `ROTA_DEFAULT_TIMEOUT`; 1 hour unless set, 0 for none. A
handler that hung without `timeout=` held its slot forever; a run's own timeout wins."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import rota
from rota import config

from .conftest import WITH_MYSQL, start_worker, store_url
from .procs import wait_until


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def test_the_default_is_one_hour_and_zero_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROTA_DEFAULT_TIMEOUT", raising=False)
    assert config.SETTINGS["default_timeout"].default == 3600.0
    assert "ROTA_DEFAULT_TIMEOUT" in config.markdown_table()
    monkeypatch.setenv("ROTA_DEFAULT_TIMEOUT", "soon")
    with pytest.raises(rota.ConfigurationError, match=r"ROTA_DEFAULT_TIMEOUT='soon' is not valid"):
        config.from_env("default_timeout")
    with pytest.raises(rota.ConfigurationError, match=r"default_timeout must be a number of seconds"):
        rota.App("sqlite:///unused.db", default_timeout=-1)


def test_a_hung_async_run_without_a_timeout_ends_at_the_default(
    app_factory: Callable[..., rota.App], caplog: pytest.LogCaptureFixture
) -> None:
    app = app_factory(default_timeout=0.3)

    @app.task(name="hangs", retries=0)
    async def hangs() -> None:
        await asyncio.sleep(3600)

    @app.task(name="own", timeout=10, retries=0)
    async def own() -> str:
        await asyncio.sleep(0.8)  # past the default: its own timeout wins
        return "done"

    caplog.set_level(logging.WARNING, logger="rota.worker")
    hung, kept = hangs.enqueue(), own.enqueue()
    start_worker(app, concurrency=2)
    wait_until(lambda: hung.refresh().is_final and kept.refresh().is_final, 20, "both runs to end")
    run = hung.refresh()
    assert run.status == "failed" and run.error is not None and run.error["type"] == "Timeout", run
    assert "default timeout of 0.3 s" in run.error["message"], run.error
    assert kept.refresh().status == "succeeded"
    lines = [r for r in caplog.records if getattr(r, "event", None) == "run_timed_out"]
    assert len(lines) == 1 and "default timeout" in lines[0].getMessage(), [r.getMessage() for r in lines]


def test_a_hung_def_run_is_recorded_at_the_default_from_the_environment(
    app_factory: Callable[..., rota.App], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread cannot be killed: the run is recorded timed out and its thread shown stuck."""
    monkeypatch.setenv("ROTA_DEFAULT_TIMEOUT", "0.3")
    app = app_factory()
    release = threading.Event()

    @app.task(name="hangs_sync", retries=0)
    def hangs_sync() -> None:
        release.wait(30)

    h = hangs_sync.enqueue()
    worker = start_worker(app, concurrency=2)
    began = time.monotonic()
    try:
        wait_until(lambda: h.refresh().is_final, 20, "the run to time out")
        assert time.monotonic() - began < 10
        run = h.refresh()
        assert run.status == "failed" and run.error is not None and run.error["type"] == "Timeout", run
        assert "default timeout of 0.3 s" in run.error["message"], run.error
        assert worker._executors.stuck == 1  # its thread keeps its slot until the handler returns
    finally:
        release.set()


def test_zero_turns_the_default_off(app_factory: Callable[..., rota.App]) -> None:
    app = app_factory(default_timeout=0)

    @app.task(name="slowish", retries=0)
    async def slowish() -> None:
        await asyncio.sleep(0.5)

    h = slowish.enqueue()
    start_worker(app, default_timeout=0)
    wait_until(lambda: h.refresh().is_final, 20, "the run to end")
    assert h.refresh().status == "succeeded"


def test_the_worker_argument_wins_over_the_app(app_factory: Callable[..., rota.App]) -> None:
    app = app_factory(default_timeout=0)

    @app.task(name="hangs2", retries=0)
    async def hangs2() -> None:
        await asyncio.sleep(3600)

    h = hangs2.enqueue()
    start_worker(app, default_timeout=0.3)
    wait_until(lambda: h.refresh().is_final, 20, "the run to time out")
    assert h.refresh().error["type"] == "Timeout"  # type: ignore[index]
