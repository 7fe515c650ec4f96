"""Workers are marked lost after three of their own leases (or the pruner's, if longer)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

import rota

from .conftest import WITH_MYSQL, make_app, start_worker, store_url, wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def test_the_pruner_marks_a_worker_lost_after_three_of_its_own_leases(db_url: str) -> None:
    app = make_app(db_url)
    app.migrate()
    store = app.store
    for worker_id, lease in (("short", 0.5), ("long", 3600.0)):
        store.register_worker(worker_id, "h", 1, 1, None, lease)
    time.sleep(1.6)  # past three of the short lease
    store.prune_workers(0.01, 3600)  # a pruner with a tiny lease: each worker's own counts
    states = {w.id: w.state for w in app.list_workers(stale_after=0.01)}
    assert states == {"short": "lost", "long": "running"}, states
    app.close()


def test_a_worker_of_an_older_release_is_judged_by_the_viewers_lease(db_url: str) -> None:
    app: rota.App = make_app(db_url)
    app.migrate()
    app.store.register_worker("old", "h", 1, 1, None)  # no lease stored
    [worker] = app.list_workers(stale_after=60)
    assert worker.alive and worker.lease is None and worker.corrupt == ()
    app.close()


def test_a_worker_registers_with_its_lease_in_one_statement(db_url: str) -> None:
    """The registry row and the worker's own lease are written together (before: the lease in
    a second statement, so a crash or a cut between them left the row without it, and the
    worker judged by each viewer's lease for its whole life). Registering again (after an
    outage, the same id) writes the lease again."""
    app = make_app(db_url)
    app.migrate()
    store = app.store
    store.register_worker("w", "h", 1, 1, None, 3600.0)
    [worker] = app.list_workers(stale_after=0.01)
    assert worker.lease == 3600.0 and worker.alive and worker.state == "running", worker
    store.worker_seen("w", "stopped")
    store.register_worker("w", "h", 1, 1, None, 7200.0)
    [worker] = app.list_workers(stale_after=0.01)
    assert worker.lease == 7200.0 and worker.alive and worker.state == "running", worker
    app.close()


def test_a_started_worker_row_carries_its_lease(db_url: str) -> None:
    app = make_app(db_url, lease=4.5)
    worker = start_worker(app)
    try:
        wait_for(lambda: any(w.id == worker.id for w in app.list_workers()), what="the worker's row")
        [row] = [w for w in app.list_workers() if w.id == worker.id]
        assert row.lease == 4.5, row
    finally:
        worker.stop(wait=True, timeout=10)
        app.close()
