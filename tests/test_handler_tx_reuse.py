"""Issue 41, item 4: a transactional handler's connection is reused by the next run. The
same parameterized statement, run many times (psycopg prepares it after a few), must keep
working after the reset between runs; so must a handler that prepares and creates things
of its own (the reset drops them)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import rota

from .conftest import WITH_MYSQL, start_worker, store_url, wait_for
from .test_transactional import connect, effects, make, record, sql


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def test_the_same_insert_in_many_runs_on_reused_connections_always_succeeds(
    app_factory: Callable[..., rota.App],
) -> None:
    app = make(app_factory)

    @app.task(name="charge", transactional=True, retries=0)
    def charge(ctx: rota.RunContext) -> None:
        record(ctx)  # one INSERT with parameters: prepared by psycopg after a few runs

    handles = [charge.enqueue() for _ in range(120)]
    start_worker(app, concurrency=2)
    wait_for(lambda: all(h.refresh().status in ("succeeded", "failed") for h in handles), 120, "runs")
    failed = [(r.id, r.error) for r in (h.refresh() for h in handles) if r.status != "succeeded"]
    assert not failed, failed[:3]
    assert len(effects(app.store.url)) == 120


def test_what_a_handler_leaves_on_its_connection_is_gone_for_the_next_run(
    app_factory: Callable[..., rota.App],
) -> None:
    app = make(app_factory)
    postgres = app.store.url.startswith("postgres")

    @app.task(name="messy", transactional=True, retries=0)
    def messy(ctx: rota.RunContext) -> None:
        record(ctx)
        if postgres:  # session state a later run must not inherit (SQLite's, MySQL's connection is new)
            sql(ctx.connection, "PREPARE mine AS SELECT 1")
            sql(ctx.connection, "CREATE TEMP TABLE scratch (x int)")
            sql(ctx.connection, "SET application_name = 'messy'")

    handles = [messy.enqueue() for _ in range(12)]
    start_worker(app, concurrency=1)
    wait_for(lambda: all(h.refresh().status in ("succeeded", "failed") for h in handles), 120, "runs")
    runs = [h.refresh() for h in handles]
    assert [r.status for r in runs] == ["succeeded"] * 12, [r.error for r in runs]
    with connect(app.store.url) as conn:
        assert len(sql(conn, "SELECT * FROM effects")) == 12


def test_runs_that_roll_back_between_them_leave_the_connection_usable(app_factory: Callable[..., rota.App]) -> None:
    """A raise rolls the transaction back (psycopg forgets its prepared statements then);
    the next run on the same connection prepares again."""
    app = make(app_factory)

    @app.task(name="some", transactional=True, retries=0)
    def some(ctx: rota.RunContext, n: int) -> None:
        record(ctx)
        if n % 4 == 3:
            raise RuntimeError("every fourth run rolls back")

    handles = [some.enqueue(n) for n in range(60)]
    start_worker(app, concurrency=1)
    wait_for(lambda: all(h.refresh().status in ("succeeded", "failed") for h in handles), 120, "runs")
    runs = [h.refresh() for h in handles]
    assert [r.status for r in runs] == ["failed" if n % 4 == 3 else "succeeded" for n in range(60)], [
        r.error for r in runs if r.status == "failed" and "every fourth" not in str(r.error)
    ][:2]
    assert len(effects(app.store.url)) == 45
