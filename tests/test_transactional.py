"""Transactional handlers (rota.transactional), on SQLite and PostgreSQL: the handler's
writes on ctx.connection and the run's "succeeded" commit together or not at all."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import rota
from rota import transactional
from rota.stores.sqlite import sqlite_path

from .conftest import MYSQL, THROUGH_BOUNCER, start_worker, store_url, wait_for


@pytest.fixture(params=[*THROUGH_BOUNCER, MYSQL])
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """Each test here once per store, and once more through a transaction-mode PgBouncer."""
    yield from store_url(request, tmp_path)


@contextlib.contextmanager
def connect(url: str) -> Iterator[Any]:
    """A connection of the test's own, autocommit, to the app's database."""
    conn: Any
    if url.startswith("sqlite"):
        conn = sqlite3.connect(sqlite_path(url), isolation_level=None, timeout=30)
    elif url.startswith("mysql"):
        from .test_txn import mysql_connection

        conn = mysql_connection(url)
        conn.autocommit(True)
    else:
        conn = psycopg.connect(url, autocommit=True)
    try:
        yield conn
    finally:
        conn.close()


def sql(conn: Any, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run `query` with ? placeholders on a sqlite3, psycopg or PyMySQL connection."""
    if not isinstance(conn, sqlite3.Connection):
        query = query.replace("?", "%s")
    if not hasattr(conn, "execute"):  # PyMySQL: statements run on a cursor
        cur = conn.cursor()
        cur.execute(query, params or None)
        return list(cur.fetchall()) if cur.description is not None else []
    cur = conn.execute(query, params)
    return list(cur.fetchall()) if cur.description is not None else []


def effects(url: str) -> list[tuple[Any, ...]]:
    with connect(url) as conn:
        return sql(conn, "SELECT run_id, attempt FROM effects ORDER BY run_id, attempt")


def make(app_factory: Callable[..., rota.App], **options: Any) -> rota.App:
    app = app_factory(**options)
    app.migrate()
    with connect(app.store.url) as conn:
        conn.execute("CREATE TABLE effects (run_id TEXT NOT NULL, attempt INTEGER NOT NULL)")
    return app


def record(ctx: rota.RunContext) -> None:
    sql(ctx.connection, "INSERT INTO effects (run_id, attempt) VALUES (?, ?)", ctx.run_id, ctx.attempt)


def test_the_handlers_row_and_succeeded_commit_together(app_factory: Callable[..., rota.App]) -> None:
    app = make(app_factory)
    seen: list[Any] = []
    events: list[tuple[str, str | None]] = []
    app.on("run_succeeded", "run_failed", "run_retrying")(lambda e: events.append((e.name, e.run_id)))

    @app.task(name="follow")
    def follow(run_id: str) -> str:
        return run_id

    @app.task(name="charge", transactional=True)  # pass_context implied
    def charge(ctx: rota.RunContext, amount: int) -> int:
        seen.append(ctx.connection)
        record(ctx)
        follow.options(connection=ctx.connection).enqueue(ctx.run_id)  # a follow-up, in the same commit
        return amount * 2

    start_worker(app)
    run = charge.enqueue(21).wait(15)
    assert (run.status, run.result, run.attempt) == ("succeeded", 42, 1)
    assert effects(app.store.url) == [(run.id, 1)]
    import pymysql

    drivers = {"sqlite": sqlite3.Connection, "mysql": pymysql.connections.Connection}
    assert isinstance(seen[0], drivers.get(app.store.dialect, psycopg.Connection))
    (follow_up,) = app.list_runs(task="follow")
    wait_for(lambda: app.get_run(follow_up.id).status == "succeeded", what="the follow-up run")
    # its event is emitted once the worker has its write back (a moment after the commit)
    wait_for(lambda: len(events) >= 2, what="both runs' events")
    assert app.events.drain(5)
    assert sorted(events) == sorted([("run_succeeded", run.id), ("run_succeeded", follow_up.id)])  # once each


def test_a_raise_rolls_back_and_the_run_is_retried_then_failed_as_usual(app_factory: Callable[..., rota.App]) -> None:
    app = make(app_factory)

    @app.task(name="flaky", transactional=True, retries=1, backoff=0)
    def flaky(ctx: rota.RunContext) -> str:
        record(ctx)
        if ctx.attempt == 1:
            raise ValueError("first attempt fails after writing")
        return "ok"

    @app.task(name="doomed", transactional=True)
    def doomed(ctx: rota.RunContext) -> None:
        record(ctx)
        raise RuntimeError("always")

    start_worker(app)
    ok = flaky.enqueue().wait(15)
    bad = doomed.enqueue().wait(15)
    assert (ok.status, ok.attempt, ok.result) == ("succeeded", 2, "ok")
    assert [a["error"]["type"] for a in ok.history] == ["ValueError"]
    assert (bad.status, bad.error["type"]) == ("failed", "RuntimeError")
    assert effects(app.store.url) == [(ok.id, 2)]  # attempt 1's row and doomed's row rolled back


def test_a_handler_that_ends_the_transaction_itself_fails_and_writes_nothing(
    app_factory: Callable[..., rota.App],
) -> None:
    app = make(app_factory)

    @app.task(name="committer", transactional=True)
    def committer(ctx: rota.RunContext) -> None:
        record(ctx)
        ctx.connection.commit()

    start_worker(app)
    run = committer.enqueue().wait(15)
    assert run.status == "failed"
    assert effects(app.store.url) == []


def test_a_handler_whose_lease_is_stolen_mid_run_commits_nothing(app_factory: Callable[..., rota.App]) -> None:
    """PostgreSQL: the test bumps the run's token from its own connection while the handler
    waits (another worker's rescue and claim, in effect). SQLite: nobody else can write while
    the handler holds the file's write lock, so the token can only have moved before its
    transaction began; the handler moves it on its own connection, which its token check
    then sees the same way. Either way the attempt's row is rolled back; the run is rescued
    when its lease expires and its retry commits."""
    app = make(app_factory, lease=1.0)
    url = app.store.url
    sqlite = app.store.dialect == "sqlite"
    waiting, go = threading.Event(), threading.Event()

    @app.task(name="slow", transactional=True, retries=1, backoff=0)
    def slow(ctx: rota.RunContext) -> str:
        record(ctx)
        if ctx.attempt == 1:
            if sqlite:
                sql(ctx.connection, "UPDATE rota_runs SET token = token + 1000 WHERE id = ?", int(ctx.run_id))
            waiting.set()
            assert go.wait(10)
        return f"attempt {ctx.attempt}"

    worker = start_worker(app)
    handle = slow.enqueue()
    assert waiting.wait(10)
    if not sqlite:
        with connect(url) as conn:
            sql(conn, "UPDATE rota_runs SET token = token + 1000 WHERE id = ?", int(handle.id))
    go.set()
    run = handle.wait(20)
    assert (run.status, run.attempt, run.result) == ("succeeded", 2, "attempt 2")
    assert effects(url) == [(run.id, 2)]  # attempt 1's row never committed
    assert worker.counters.succeeded == 1


def test_a_handler_past_its_timeout_does_not_commit(app_factory: Callable[..., rota.App]) -> None:
    app = make(app_factory)

    @app.task(name="late", transactional=True, timeout=0.3)
    def late(ctx: rota.RunContext) -> str:
        record(ctx)
        time.sleep(0.6)
        return "too late"

    start_worker(app)
    run = late.enqueue().wait(15)
    assert (run.status, run.error["type"]) == ("failed", "Timeout")
    time.sleep(0.5)  # the handler's thread has returned and rolled back
    assert effects(app.store.url) == []
    assert app.get_run(run.id).status == "failed"


def test_transactional_schedules(app_factory: Callable[..., rota.App]) -> None:
    app = make(app_factory)

    @app.schedule(every=timedelta(hours=1), name="nightly", run_immediately=True, transactional=True)
    def nightly(ctx: rota.RunContext) -> str:
        record(ctx)
        return ctx.schedule or ""

    start_worker(app)
    wait_for(lambda: any(r.status == "succeeded" for r in app.list_runs(schedule="nightly")), what="the tick")
    (run,) = app.list_runs(schedule="nightly")
    assert run.result == "nightly"
    assert effects(app.store.url) == [(run.id, 1)]


def test_declaration_errors(tmp_path: Any) -> None:
    app = rota.App(f"sqlite:///{tmp_path}/rota.db")
    with pytest.raises(rota.ConfigurationError, match="isolation='process'"):

        @app.task(transactional=True, isolation="process")
        def isolated(ctx: rota.RunContext) -> None: ...

    with pytest.raises(rota.ConfigurationError, match="transactional must be True or False, got 'yes'"):
        app.task(transactional="yes")
    with pytest.raises(rota.ConfigurationError, match="plain `def` handler"):

        @app.task(transactional=True)
        async def asynchronous(ctx: rota.RunContext) -> None: ...

    with pytest.raises(rota.ConfigurationError, match="isolation='process'"):

        @app.schedule(every=60, transactional=True, isolation="process")
        def scheduled(ctx: rota.RunContext) -> None: ...

    assert app.tasks == {} and app.schedules == {}

    @app.task(name="plain", pass_context=True)
    def plain(ctx: rota.RunContext) -> None: ...

    assert app.task(name="tx", transactional=True)(lambda ctx: None).opts.pass_context
    context = rota.RunContext("1", "plain", 1, 1, 1, datetime.now(UTC), None)
    with pytest.raises(AttributeError, match="only given to transactional tasks"):
        context.connection  # noqa: B018


def test_an_attempt_the_worker_decided_first_cannot_commit(app_factory: Callable[..., rota.App]) -> None:
    """The commit gate, without a worker: once the loop has recorded a timeout or a lost
    lease (`committing` answered False), the attempt rolls back even with a valid token."""
    app = make(app_factory)
    key = object()
    answers: list[bool] = []

    @app.task(name="gated", transactional=True)
    def gated(ctx: rota.RunContext) -> str:
        record(ctx)
        answers.append(transactional.committing(key))  # the loop decides first
        return "done"

    handle = gated.enqueue()
    (claim,) = app.store.claim("test-owner", 1, None, 30.0)
    ctx = rota.RunContext(handle.id, "gated", claim.attempt, claim.max_attempts, claim.token, claim.scheduled_for, None)
    kind, _ = transactional.call_transactional(app.store, gated, ctx, [], {}, timeout=None, key=key)
    assert (kind, answers) == ("lost", [False])
    assert effects(app.store.url) == []
    assert app.get_run(handle.id).status == "running"  # untouched: the worker records its decision
    assert transactional.committing(key) is False  # forgotten once the attempt ended
    ctx = rota.RunContext(handle.id, "gated", claim.attempt, claim.max_attempts, claim.token, claim.scheduled_for, None)
    kind, result = transactional.call_transactional(app.store, gated, ctx, [], {}, timeout=None, key=object())
    assert (kind, result) == (transactional.COMMITTED, '"done"')
    assert app.get_run(handle.id).status == "succeeded"
    assert effects(app.store.url) == [(handle.id, 1)]
