"""Workers are marked lost after three of their own leases (or the pruner's, if longer)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

import rota

from .conftest import WITH_MYSQL, make_app, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def test_the_pruner_marks_a_worker_lost_after_three_of_its_own_leases(db_url: str) -> None:
    app = make_app(db_url)
    app.migrate()
    store = app.store
    for worker_id, lease in (("short", 0.5), ("long", 3600.0)):
        store.register_worker(worker_id, "h", 1, 1, None)
        store.worker_lease(worker_id, lease)  # type: ignore[attr-defined]
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
