"""A run the worker cannot start, and an observer that raises: neither strands a claimed
run (running in the database, nothing running it) nor stops the runs claimed with it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import rota
from rota.models import Run

from .conftest import WITH_MYSQL, store_url, wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def _ended(app: rota.App, n: int) -> list[Run]:
    runs = app.list_runs(limit=100)
    return runs if len(runs) == n and all(r.status in ("succeeded", "failed") for r in runs) else []


def test_a_run_whose_executor_refuses_it_fails_its_attempt_and_the_batch_goes_on(
    app_factory: Callable[..., rota.App],
) -> None:
    app = app_factory()

    @app.task(name="job", retries=1)
    def job(n: int) -> int:
        return n

    handles = [job.enqueue(n) for n in range(6)]
    worker = app.worker(install_signal_handlers=False, concurrency=6, poll_interval=0.05)
    threads = worker._executors.by_kind["thread"]  # type: ignore[attr-defined]
    submit, refused = threads.submit, []

    def refuse_first(active: Any, task: Any) -> None:
        if not refused:
            refused.append(active.claim.id)
            raise OSError(11, "Resource temporarily unavailable")  # as a fork that fails
        submit(active, task)

    threads.submit = refuse_first
    worker.start()
    try:
        wait_for(lambda: all(h.refresh().status == "succeeded" for h in handles), what="every run")
    finally:
        worker.stop(wait=True, timeout=10)
    (first,) = [h for h in handles if int(h.id) == refused[0]]
    run = app.get_run(first.id)
    assert run.attempt == 2 and run.result == run.args[0]  # the refused attempt counted, then retried
    assert [h["status"] for h in run.history] == ["failed"], run.history
    assert "Resource temporarily unavailable" in str(run.history[0]["error"]), run.history


def test_an_observer_that_raises_is_logged_once_and_changes_no_run(
    app_factory: Callable[..., rota.App], caplog: pytest.LogCaptureFixture
) -> None:
    app = app_factory()

    @app.task(name="job")
    def job(n: int) -> int:
        return n

    for n in range(5):
        job.enqueue(n)
    worker = app.worker(install_signal_handlers=False, concurrency=5, poll_interval=0.05)

    def broken(event: str, claim: Any, at: float) -> None:
        raise ValueError("observer bug")

    worker.observe(broken)
    caplog.set_level(logging.ERROR, logger="rota.worker")
    worker.start()
    try:
        wait_for(lambda: bool(_ended(app, 5)), what="every run to end")
    finally:
        worker.stop(wait=True, timeout=10)
    assert {r.status for r in app.list_runs()} == {"succeeded"}
    # (the worker's records only: another logger's may name the test's path, "…observer…")
    logged = [r for r in caplog.records if r.name == "rota.worker" and "observer" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None, [r.getMessage() for r in logged]
