"""`rota limits`: each stored limit and rate with its running and waiting runs."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import rota

from .conftest import WITH_MYSQL, store_url
from .test_cli import cli


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def test_rota_limits_shows_each_limit_and_rate_with_running_and_waiting(
    db_url: str, app_factory: Callable[..., rota.App]
) -> None:
    app = app_factory()

    @app.task(limit=rota.Limit(1, by="customer"), name="export")
    def export(customer: int) -> None: ...

    @app.task(rate=rota.Rate(5, per=60, name="github"), name="gh")
    def gh() -> None: ...

    app.migrate()
    app.prepare()
    for c in (1, 1, 2):
        export.enqueue(c)
    gh.enqueue()
    app.store.claim("w", 10, None, 30.0)
    code, out = cli(db_url, "limits", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["limits"] == [
        {"name": "export", "max": 1, "running": 2, "waiting": 1, "keys": 2, "keys_full": 2, "corrupt": []}
    ]
    assert data["rates"] == [
        {
            "name": "github",
            "max": 5,
            "per_seconds": 60.0,
            "started_in_window": 1,
            "waiting": 0,
            "keys": 0,
            "keys_full": 0,
            "corrupt": [],
        }
    ]
    code, out = cli(db_url, "limits")
    assert code == 0 and "export" in out and "github" in out and "60s" in out


def test_rota_limits_on_a_database_without_limits_says_how_they_get_there(db_url: str) -> None:
    app = rota.App(db_url)
    app.migrate()
    app.close()
    code, out = cli(db_url, "limits")
    assert code == 0 and "a worker stores its tasks' limit= and rate= when it starts" in out


def test_rota_limits_counts_the_runs_waiting_for_a_declaring_worker_to_key_them(
    db_url: str, app_factory: Callable[..., rota.App]
) -> None:
    app = app_factory()

    @app.task(limit=rota.Limit(1, by=lambda order: order["shop"]), name="by_call")
    def by_call(order: dict[str, str]) -> None: ...

    app.migrate()
    app.prepare()
    client = app_factory()  # declares nothing, as `rota trigger`
    client.add_schedule("a", "by_call", every=3600, args=[{"shop": "a"}])
    client.trigger("a")
    code, out = cli(db_url, "limits", "--json")
    assert code == 0 and json.loads(out)["unresolved"] == 1, out
    code, out = cli(db_url, "limits")
    assert "1 run(s) wait for a worker that declares their task" in out


def test_rota_limits_says_max_is_per_key(db_url: str, app_factory: Callable[..., rota.App]) -> None:
    """A `by=` limit of 1 with two keys running read `max 1, running 2`, like a breach."""
    app = app_factory()

    @app.task(limit=rota.Limit(1, by="customer"), name="export")
    def export(customer: int) -> None: ...

    app.migrate()
    app.prepare()
    for c in (1, 2):
        export.enqueue(c)
    app.store.claim("w", 10, None, 30.0)
    code, out = cli(db_url, "limits")
    header, row = out.splitlines()[1], out.splitlines()[3]
    assert code == 0 and header.split() == ["limit", "max", "per", "key", "running", "(all", "keys)", "waiting", "keys"]
    assert row.split() == ["export", "1", "2", "0", "2"], out
