"""rota.testing: the helpers users get for their own tests."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

import rota
import rota.testing

from .conftest import WITH_MYSQL, make_app, store_url
from .test_transactional import connect, sql


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def test_run_pending_executes_due_runs_and_schedule_ticks(db_url: str) -> None:
    clock = rota.FakeClock()
    app = make_app(db_url, clock=clock)
    calls: list[str] = []

    @app.task(name="greet")
    def greet(name: str) -> str:
        calls.append(name)
        return f"hello {name}"

    @app.schedule(every=timedelta(hours=1), name="hourly")
    def hourly() -> None:
        calls.append("tick")

    run = greet.enqueue("ada")
    later = greet.options(delay=60).enqueue("bob")
    assert rota.testing.assert_enqueued(app, greet, "ada").id == run.id
    with pytest.raises(AssertionError, match=r"no pending run of greet with args=\['eve'\]"):
        rota.testing.assert_enqueued(app, "greet", "eve")
    assert rota.testing.run_pending(app) == 1
    assert calls == ["ada"] and app.get_run(run.id).result == "hello ada"
    assert app.get_run(later.id).status == "pending"
    clock.advance(timedelta(hours=1))
    assert rota.testing.run_pending(app) == 2
    assert sorted(calls) == ["ada", "bob", "tick"]
    app.close()


def test_call_gives_a_transactional_handler_its_connection(db_url: str) -> None:
    """Issue 44 item 4: call() on a transactional task ran it without ctx.connection, and the
    error told the caller to declare transactional=True about a task that was."""
    app = make_app(db_url)
    app.migrate()
    with connect(db_url) as conn:  # before: a CREATE TABLE commits MySQL's transaction
        sql(conn, "CREATE TABLE notes (text TEXT)")

    @app.task(name="note", transactional=True)
    def note(ctx: rota.RunContext, text: str) -> str:
        sql(ctx.connection, "INSERT INTO notes VALUES (?)", text)
        if text == "bad":
            raise ValueError("refused")
        return text

    assert rota.testing.call(note, "kept") == "kept"
    with pytest.raises(ValueError, match="refused"):
        rota.testing.call(note, "bad")  # rolled back with the handler's writes
    with app._store.handler_transaction() as tx:
        rows = [tuple(r) for r in sql(tx.connection, "SELECT text FROM notes")]
    assert rows == [("kept",)]
    with pytest.raises(AttributeError, match=r"rota\.testing\.call"):
        rota.testing.fake_context("plain").connection  # noqa: B018
    app.close()
