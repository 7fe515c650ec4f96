"""What a claim hands back is what it stored (issue 42). The MySQL/MariaDB claim no longer
reads its runs back after its update: it builds them from what its lock read (the runs'
columns and the database's clock, once) and the values it wrote. Token, attempt, start and
lease of every claimed run, started and held, as the database holds them afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from rota.stores.base import Claimed

from .conftest import WITH_MYSQL, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    yield from store_url(request, tmp_path)


def _as_stored(app: Any, claimed: list[Claimed]) -> None:
    for c in claimed:
        run = app.store.get_run(c.id)
        assert run is not None and run.status == "running"
        assert (c.token, c.attempt, c.started_at) == (run.token, run.attempt, run.started_at), c.id
        # MySQL: the lease stored counts from the update's clock, the one handed back from the
        # lock's (never later than stored: the worker renews early, never late)
        assert c.lease_until is not None and run.lease_until is not None
        assert timedelta(0) <= run.lease_until - c.lease_until < timedelta(seconds=2), c.id


def test_a_claim_hands_back_its_runs_as_it_stored_them(app: Any) -> None:
    task = app.task(name="t")(lambda: None)
    for priority in (0, 5, 0, 9, 0):
        task.options(priority=priority).enqueue()
    claimed = app.store.claim("w", 4, None, 12.5, start=2)
    assert len(claimed) == 4
    _as_stored(app, claimed)
    started = [c for c in claimed if c.started_at is not None]
    assert len(started) == 2 and all(c.attempt == 1 for c in started)
    assert all(c.attempt == 0 for c in claimed if c.started_at is None)
    assert len({c.token for c in claimed}) == 4
    if app.store.dialect == "mysql":  # the lease from the same reading of the clock as the start
        assert all(c.lease_until - c.started_at == timedelta(seconds=12.5) for c in started)
    rest = app.store.claim("w", 4, None, 30.0)
    assert len(rest) == 1 and min(r.token for r in rest) > max(c.token for c in claimed)
    _as_stored(app, rest)


def test_a_claim_ahead_hands_back_its_held_runs_as_it_stored_them(app: Any) -> None:
    task = app.task(name="t")(lambda: None)
    task.options(delay=0.5).enqueue()
    task.options(delay=0.5).enqueue()
    claimed = app.store.claim_ahead("w", 5, None, 30.0, 5.0)
    if app.store.dialect == "sqlite" and not claimed:
        pytest.skip("this store claims none ahead")
    assert len(claimed) == 2 and all(c.started_at is None and c.attempt == 0 for c in claimed)
    _as_stored(app, claimed)
