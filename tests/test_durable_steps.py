"""Durable steps (rota/durable.py, issue 43) on every store: checkpoints fenced by the run's
token, resume after the last saved step, and the errors of a step used wrongly."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import rota
from rota import durable
from rota.stores.sqlite import sqlite_path

from .conftest import WITH_MYSQL, start_worker, store_url, wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def sql(url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run `query` (? placeholders) on a connection of the test's own, autocommit."""
    if url.startswith("sqlite"):
        with sqlite3.connect(sqlite_path(url), isolation_level=None, timeout=30) as conn:
            return conn.execute(query, params).fetchall()
    if url.startswith("mysql"):
        from .test_txn import mysql_connection

        my = mysql_connection(url)
        try:
            my.autocommit(True)
            cur = my.execute(query.replace("?", "%s"), params)
            return list(cur.fetchall()) if cur.description is not None else []
        finally:
            my.close()
    with psycopg.connect(url, autocommit=True) as pg:
        cur = pg.execute(query.replace("?", "%s"), params)
        return list(cur.fetchall()) if cur.description is not None else []


def test_a_retry_resumes_after_the_last_saved_step(app: rota.App) -> None:
    calls: list[str] = []

    def effect(what: str, n: int) -> dict[str, Any]:
        calls.append(what)
        return {"what": what, "n": n}

    @app.task(name="flow", retries=2, backoff=rota.Backoff(base=0.01, jitter=0), pass_context=True)
    def flow(ctx: rota.RunContext, n: int) -> list[Any]:
        a = ctx.step("create", effect, "create", n)
        b = ctx.step("send", effect, "send", a["n"] + 1)
        if ctx.attempt == 1:
            raise ConnectionError("the network blinked after two steps")
        c = ctx.step("tip", effect, "tip", b["n"] + 1)
        return [a, b, c]

    start_worker(app)
    run = flow.enqueue(1).wait(15)
    assert run.status == "succeeded", run.error
    assert calls == ["create", "send", "tip"]  # no saved step ran twice
    assert [s["name"] for s in run.steps] == ["create", "send", "tip"]
    assert [s["attempt"] for s in run.steps] == [1, 1, 2]
    assert all(s["outcome"] == "succeeded" for s in run.steps)
    assert run.result[2] == {"what": "tip", "n": 3}
    assert run.to_json()["steps"][0]["name"] == "create"


def test_a_failed_step_is_recorded_and_runs_again_on_the_retry(app: rota.App) -> None:
    tries: list[int] = []

    def flaky() -> str:
        tries.append(1)
        if len(tries) == 1:
            raise ValueError("the first try fails")
        return "ok"

    @app.task(name="flaky_step", retries=1, backoff=rota.Backoff(base=0.01, jitter=0), pass_context=True)
    def flaky_step(ctx: rota.RunContext) -> str:
        return str(ctx.step("flaky", flaky))

    start_worker(app)
    run = flaky_step.enqueue().wait(15)
    assert (run.status, run.result, len(tries)) == ("succeeded", "ok", 2)
    assert run.steps[0]["outcome"] == "succeeded" and run.steps[0]["attempt"] == 2


def test_a_step_saved_before_a_held_runs_start_is_written_records_the_handlers_attempt(app: rota.App) -> None:
    """A run claimed ahead (held) counts its attempt when its start is written, which may come
    after its handler's first step: the step still records the handler's attempt."""
    url = app.store.url
    seen: list[int] = []

    @app.task(name="early_step", pass_context=True)
    def early_step(ctx: rota.RunContext) -> str:
        seen.append(ctx.attempt)  # as a held run whose start is not written yet:
        sql(url, "UPDATE rota_runs SET started_at = NULL, attempt = attempt - 1 WHERE id = ?", int(ctx.run_id))
        return str(ctx.step("first", lambda: "x"))

    start_worker(app)
    run = early_step.enqueue().wait(15)
    assert run.status == "succeeded" and seen == [1]
    assert run.steps[0]["attempt"] == 1


def test_a_stale_workers_checkpoint_is_refused_and_its_result_not_used(app: rota.App) -> None:
    url = app.store.url
    after: list[Any] = []
    refused: list[Exception] = []

    @app.task(name="taken_over", pass_context=True)
    def taken_over(ctx: rota.RunContext) -> str:
        # another worker took the run over: its token is no longer ours
        sql(url, "UPDATE rota_runs SET token = token + 1000 WHERE id = ?", int(ctx.run_id))
        try:
            value = ctx.step("charge", lambda: "charged")
        except rota.StepRefused as exc:
            refused.append(exc)
            raise
        after.append(value)  # never reached
        return "done"

    start_worker(app)
    ref = taken_over.enqueue()
    wait_for(lambda: len(refused) == 1, what="the refused checkpoint")
    assert after == []
    assert app.get_run(ref.id).steps == []
    assert app.get_run(ref.id).status == "running"  # its finish was fenced off too (the new "owner" decides)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("twice", ["'a' is used twice"]),
        ("not_json", ["step 'b'", "cannot be saved as JSON", "set"]),
        ("bad_name", ["invalid step name ''"]),
        ("too_many", ["passed 3 steps", "'s3'", "MAX_STEPS"]),
    ],
)
def test_a_step_used_wrongly_fails_the_run_with_one_clear_error(
    app: rota.App, monkeypatch: pytest.MonkeyPatch, body: str, words: list[str]
) -> None:
    monkeypatch.setattr(durable, "MAX_STEPS", 3)

    @app.task(name="wrong", pass_context=True)
    def wrong(ctx: rota.RunContext) -> None:
        if body == "twice":
            ctx.step("a", lambda: 1)
            ctx.step("a", lambda: 2)
        elif body == "not_json":
            ctx.step("b", lambda: {1, 2})
        elif body == "bad_name":
            ctx.step("", lambda: 1)
        else:
            for i in range(5):
                ctx.step(f"s{i}", lambda: 1)

    start_worker(app)
    run = wrong.enqueue().wait(15)
    assert run.status == "failed" and run.error is not None
    assert run.error["type"] == "StepError"
    for word in words:
        assert word in run.error["message"], run.error["message"]


def test_async_handlers_await_their_steps(app: rota.App) -> None:
    calls: list[int] = []

    async def fetch(n: int) -> int:
        await asyncio.sleep(0.001)
        calls.append(n)
        return n * 10

    @app.task(name="async_flow", retries=1, backoff=rota.Backoff(base=0.01, jitter=0), pass_context=True)
    async def async_flow(ctx: rota.RunContext) -> int:
        a = await ctx.step_async("fetch", fetch, 4)
        b = await ctx.step_async("plain", lambda: 2)
        if ctx.attempt == 1:
            raise ConnectionError("again")
        return int(a) + int(b)

    start_worker(app)
    run = async_flow.enqueue().wait(15)
    assert (run.status, run.result, calls) == ("succeeded", 42, [4])


def test_a_transactional_handlers_steps_commit_with_its_writes(app: rota.App) -> None:
    url = app.store.url
    sql(url, "CREATE TABLE ledger (run_id BIGINT, what TEXT)")
    calls: list[int] = []

    @app.task(name="settle", transactional=True, retries=1, backoff=rota.Backoff(base=0.01, jitter=0))
    def settle(ctx: rota.RunContext) -> str:
        def write() -> str:
            calls.append(1)
            q = "INSERT INTO ledger VALUES (?, 'paid')"
            if isinstance(ctx.connection, sqlite3.Connection):
                ctx.connection.execute(q, (int(ctx.run_id),))
            else:
                with ctx.connection.cursor() as cur:  # psycopg or PyMySQL
                    cur.execute(q.replace("?", "%s"), (int(ctx.run_id),))
            return "paid"

        got = ctx.step("pay", write)
        if ctx.attempt == 1:
            raise ConnectionError("rolled back: the write and its checkpoint together")
        return str(got)

    start_worker(app)
    run = settle.enqueue().wait(15)
    assert (run.status, run.result) == ("succeeded", "paid")
    assert len(calls) == 2  # the first checkpoint rolled back with its write
    assert sql(url, "SELECT what FROM ledger") == [("paid",)]
    assert [s["name"] for s in run.steps] == ["pay"]


def test_a_store_without_the_durable_statements_refuses_steps_and_signals_with_one_clear_error(
    app: rota.App,
) -> None:
    store: Any = app.store
    store.queries = {name: sql for name, sql in store.queries.items() if name != "save_step"}
    assert not store.durable_supported

    @app.task(name="no_statements", pass_context=True)
    def no_statements(ctx: rota.RunContext) -> None:
        ctx.step("a", lambda: 1)

    start_worker(app)
    run = no_statements.enqueue().wait(15)
    assert run.status == "failed" and run.error is not None
    assert "a store without durable statements" in run.error["message"]
    assert run.steps == [] and run.waiting is None
    with pytest.raises(rota.StepError, match=f"not available on the {store.dialect} store yet"):
        app.signal(run.id, "x")
