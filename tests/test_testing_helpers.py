"""rota.testing: the helpers users get for their own tests."""

from __future__ import annotations

from datetime import timedelta

import pytest

import rota
import rota.testing

from .conftest import make_app


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

    @app.task(name="note", transactional=True)
    def note(ctx: rota.RunContext, text: str) -> str:
        ctx.connection.execute("CREATE TABLE IF NOT EXISTS notes (text TEXT)")
        ctx.connection.execute(f"INSERT INTO notes VALUES ('{text}')")
        if text == "bad":
            raise ValueError("refused")
        return text

    assert rota.testing.call(note, "kept") == "kept"
    with pytest.raises(ValueError, match="refused"):
        rota.testing.call(note, "bad")  # rolled back with the handler's writes
    with app._store.handler_transaction() as tx:
        rows = [tuple(r) for r in tx.connection.execute("SELECT text FROM notes").fetchall()]
    assert rows == [("kept",)]
    with pytest.raises(AttributeError, match=r"rota\.testing\.call"):
        rota.testing.fake_context("plain").connection  # noqa: B018
    app.close()
