"""A damaged fencing token counter (issue 41): SQLite and MySQL/MariaDB keep it in a row of
rota_counters (PostgreSQL takes tokens from a sequence). One at its column's maximum, or below
0, failed every claim of every worker (SQLite: OverflowError; MySQL: a BIGINT out of range,
the poll role restarting forever) and was never named. It starts again past every token a
run holds, named once; plain claims and flow (limited) claims alike."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

import rota
import rota.testing
from rota import quarantine

from .conftest import WITH_MYSQL, store_url
from .test_damaged_rows import _named, _sql


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


@pytest.fixture(autouse=True)
def _named_afresh() -> None:
    quarantine.forget()


@pytest.mark.parametrize("limited", [False, True], ids=["plain", "limited"])
@pytest.mark.parametrize("value", ["9223372036854775807", "9223372036854000000", "-5"])
def test_a_damaged_token_counter_never_stops_the_claims(
    app_factory: Any, db_url: str, caplog: pytest.LogCaptureFixture, value: str, limited: bool
) -> None:
    if db_url.startswith("postgres"):
        pytest.skip("PostgreSQL takes tokens from a sequence, not a row")
    caplog.set_level(logging.WARNING, logger="rota")
    app = app_factory()
    task = app.task(name="t", **({"limit": 2} if limited else {}))(lambda x: x)
    first = task.enqueue(1)
    rota.testing.run_pending(app)
    held = app.get_run(first.id).token  # type: ignore[union-attr]
    _sql(app, f"UPDATE rota_counters SET value = {value} WHERE name = 'token'")
    handles = [task.enqueue(i) for i in range(3)]
    rota.testing.run_pending(app)
    runs = [app.get_run(h.id) for h in handles]
    assert all(r is not None and r.status == "succeeded" for r in runs), runs
    tokens = [r.token for r in runs if r is not None]
    assert all(t is not None and held is not None and t > held for t in tokens) and len(set(tokens)) == 3
    assert _named(caplog, quarantine.COUNTER) == {"token": 1}
