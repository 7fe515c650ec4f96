"""Each worker is judged by its own lease (issue 44, item 9). The listings judged every
worker by the viewer's lease: a worker started with a long lease read `lost` between its
heartbeats (and `rota_workers_alive` fell to 0), while a `kill -9`'d worker with a short one
read `running` for the viewer's whole lease. Real worker processes, both stores."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

import rota
from rota.cli import main
from rota.web import create_app

from .conftest import WITH_MYSQL, make_app, store_url
from .procs import WorkerProcs, wait_until


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


@pytest.fixture
def viewer(db_url: str, request: pytest.FixtureRequest) -> Iterator[rota.App]:
    app = make_app(db_url, lease=request.param)
    yield app
    app.close()


def _alive_metric(app: rota.App) -> str:
    with TestClient(create_app(app), base_url="http://127.0.0.1") as client:
        text = client.get("/metrics").text
    return next(line for line in text.splitlines() if line.startswith("rota_workers_alive "))


def _shown(app: rota.App) -> str:
    result = CliRunner(env={"COLUMNS": "250"}).invoke(main, ["--database-url", app.database_url, "workers"])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("viewer", [1.0], indirect=True)
def test_a_worker_with_a_long_lease_reads_alive_between_its_heartbeats(procs: WorkerProcs, viewer: rota.App) -> None:
    procs.start(lease=60.0, env={"ROTA_TEST_LEASE": "60"})  # a heartbeat every 20 s
    wait_until(lambda: bool(viewer.list_workers()), 30, "the worker to register")
    time.sleep(2.5)  # past the viewer's lease, well within the worker's
    [worker] = viewer.list_workers()
    assert (worker.state, worker.alive, worker.lease) == ("running", True, 60.0), worker
    assert viewer.stats()["workers"] == 1
    assert _alive_metric(viewer) == "rota_workers_alive 1.0"
    assert "lost" not in _shown(viewer)


@pytest.mark.parametrize("viewer", [30.0], indirect=True)
def test_a_killed_worker_with_a_short_lease_reads_lost_within_its_lease(procs: WorkerProcs, viewer: rota.App) -> None:
    proc = procs.start(lease=3.0, env={"ROTA_TEST_LEASE": "3"})
    # alive with its own lease recorded (a separate statement after the registration: a worker
    # killed between the two is judged by the viewer's lease, 30 s, as an older release's)
    registered = lambda: any(w.alive and w.lease == 3.0 for w in viewer.list_workers())  # noqa: E731
    wait_until(registered, 30, "the worker to register with its lease")
    procs.kill9(proc)
    killed = time.monotonic()
    wait_until(lambda: not any(w.alive for w in viewer.list_workers()), 15, "the killed worker to read lost")
    assert time.monotonic() - killed < 8, "read alive well past its own lease of 3 s"
    [worker] = viewer.list_workers()
    assert worker.state == "lost", worker
    assert viewer.stats()["workers"] == 0
    assert _alive_metric(viewer) == "rota_workers_alive 0.0"
    assert "lost" in _shown(viewer)
