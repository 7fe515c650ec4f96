"""A cancellation asked by another process reaches a running run at once on SQLite too
(issue 44, item 8). SQLite has no NOTIFY: the request waited for the worker's next heartbeat
(a third of its lease: 10 s by default), so `overlap="replace"` did not replace a run shorter
than that. The worker's data_version watch now reads its runs' cancel requests when the file
changes. PostgreSQL (NOTIFY) is held to the same bound."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import rota

from .conftest import WITH_MYSQL, make_app, start_worker, store_url
from .procs import WorkerProcs, wait_until


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


LEASE = 30.0  # the default lease: a heartbeat every 10 s
BOUND = 0.5


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_cancel_from_another_process_reaches_a_running_run_within_half_a_second(
    app_factory: Callable[..., rota.App], kind: str
) -> None:
    app = app_factory(lease=LEASE)
    seen: list[float] = []

    if kind == "sync":

        @app.task(name="waits", pass_context=True, retries=0)
        def waits(ctx: rota.RunContext) -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if ctx.cancelled:
                    seen.append(time.monotonic())
                    ctx.raise_if_cancelled()
                time.sleep(0.005)

    else:

        @app.task(name="waits", retries=0)  # type: ignore[no-redef]
        async def waits() -> None:
            try:
                await asyncio.sleep(30)
            finally:
                seen.append(time.monotonic())

    h = app.tasks["waits"].enqueue()
    start_worker(app, concurrency=1)
    wait_until(lambda: h.refresh().status == "running" and h.refresh().started_at is not None, 20, "the run to start")
    time.sleep(0.3)  # past the start's own writes
    other = app_factory(lease=LEASE)  # another App: as `rota cancel` in another process
    asked = time.monotonic()
    other.cancel(h.id)
    wait_until(lambda: bool(seen), 15, "the handler to see its cancellation", interval=0.01)
    took = seen[0] - asked
    assert took < BOUND, f"the cancellation took {took:.2f} s to reach the handler"
    wait_until(lambda: h.refresh().is_final, 15, "the run to end")
    assert h.refresh().status == "cancelled"


@pytest.fixture
def client(db_url: str) -> Iterator[rota.App]:
    app = make_app(db_url, lease=LEASE)  # the tasks are the worker's (tests/apps/schedules.py)
    yield app
    app.close()


def _starts(log: Path) -> list[dict[str, object]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if '"start"' in line]


@pytest.mark.parametrize("task", ["slow_cooperative", "slow_async"])
def test_overlap_replace_replaces_a_short_run_across_processes(
    procs: WorkerProcs, client: rota.App, tmp_path: Path, task: str
) -> None:
    """A real worker (lease 30 s) runs the schedule's run; a trigger from another process
    replaces it: the first run ends cancelled and the new one starts within about a second."""
    procs.start("tests.apps.schedules:app", concurrency=2, lease=LEASE, env={"ROTA_TEST_LEASE": str(LEASE)})
    client.add_schedule("replaced", task, every=3600, args=[30], overlap="replace")
    log = tmp_path / "executions.log"
    first = client.trigger("replaced")
    wait_until(lambda: len(_starts(log)) == 1, 30, "the first run to start")
    asked = time.monotonic()
    second = client.trigger("replaced")
    wait_until(lambda: len(_starts(log)) == 2, 15, "the replacing run to start", interval=0.01)
    took = time.monotonic() - asked
    assert first.refresh().status == "cancelled", first.refresh()
    assert str(_starts(log)[1]["run"]) == str(second.id)
    assert took < 1.5, f"the replacing run started {took:.2f} s after the trigger: {procs.output(0)}"
