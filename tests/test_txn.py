"""Enqueue inside the caller's transaction (rota.txn), on SQLite, PostgreSQL and MySQL/MariaDB.

The caller's connection is the driver's own (sqlite3, psycopg or PyMySQL), or SQLAlchemy's. A worker
is started with a long poll interval: a committed run is executed only if the commit woke
it (NOTIFY at commit on PostgreSQL, PRAGMA data_version on SQLite, the change probe on MySQL)."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import unquote, urlparse

import psycopg
import pytest

import rota
from rota.stores.sqlite import sqlite_path

from .conftest import MYSQL, STORES, make_app, postgres_schema, require_module, start_worker, store_url


@pytest.fixture(params=[*STORES, MYSQL])
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    yield from store_url(request, tmp_path)


WAKE_ONLY = 30.0  # poll interval: longer than any test waits, so only a wake-up can help


@contextlib.contextmanager
def caller_connection(url: str) -> Iterator[Any]:
    """The application's own connection to the app's database, with a `signups` table."""
    conn: Any
    if url.startswith("sqlite"):
        conn = sqlite3.connect(sqlite_path(url))
    elif url.startswith("mysql"):
        conn = mysql_connection(url)
    else:
        conn = psycopg.connect(url)
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS signups (email TEXT)")
        conn.commit()
        yield conn
    finally:
        conn.close()


def mysql_connection(url: str) -> Any:
    """A PyMySQL connection with psycopg's `execute` (these tests' helpers use it)."""
    import pymysql

    class Connection(pymysql.connections.Connection):  # type: ignore[type-arg]
        def execute(self, sql: str, params: Any = None) -> Any:
            cur = self.cursor()
            cur.execute(sql, params)
            return cur

    parsed = urlparse(url)
    return Connection(
        host=parsed.hostname, port=parsed.port or 3306, user=unquote(parsed.username or ""),
        password=unquote(parsed.password or ""), database=parsed.path.lstrip("/"), charset="utf8mb4",
    )  # fmt: skip


def add_signup(conn: Any, email: str) -> None:
    placeholder = "?" if isinstance(conn, sqlite3.Connection) else "%s"
    conn.execute(f"INSERT INTO signups (email) VALUES ({placeholder})", (email,))


def signups(url: str) -> list[str]:
    with caller_connection(url) as conn:
        return sorted(r[0] for r in conn.execute("SELECT email FROM signups").fetchall())


def welcome_app(app_factory: Callable[..., rota.App], **options: Any) -> tuple[rota.App, rota.Task[..., Any]]:
    app = app_factory(**options)

    @app.task(name="welcome")
    def welcome(email: str) -> str:
        return f"hello {email}"

    app.migrate()
    return app, welcome


def test_rolled_back_enqueue_leaves_no_run_and_committed_one_runs(
    app_factory: Callable[..., rota.App], db_url: str
) -> None:
    app, welcome = welcome_app(app_factory, poll_interval=WAKE_ONLY)
    worker = start_worker(app)
    with caller_connection(db_url) as conn:
        add_signup(conn, "gone@example.com")
        lost = welcome.options(connection=conn).enqueue("gone@example.com")
        assert lost.created
        conn.rollback()
        assert app.list_runs() == [] and signups(db_url) == []

        time.sleep(0.3)  # the worker is idle, waiting for a wake-up
        add_signup(conn, "kept@example.com")
        kept = welcome.options(connection=conn).enqueue("kept@example.com")
        assert app.list_runs() == []  # not visible before commit
        conn.commit()
    run = kept.wait(timeout=10)
    assert (run.status, run.result) == ("succeeded", "hello kept@example.com")
    assert signups(db_url) == ["kept@example.com"]
    assert [r.id for r in app.list_runs()] == [kept.id]
    assert worker.counters.dispatched == 1


def test_enqueue_many_in_a_transaction(app_factory: Callable[..., rota.App], db_url: str) -> None:
    app, welcome = welcome_app(app_factory)
    calls = [((f"u{i}@example.com",), {}) for i in range(50)]
    with caller_connection(db_url) as conn:
        welcome.enqueue_many(calls, connection=conn)
        conn.rollback()
        assert app.list_runs() == []
        ids = welcome.options(priority=3).enqueue_many(calls, connection=conn)
        conn.commit()
    runs = {r.id: r for r in app.list_runs(limit=1000)}
    assert sorted(runs, key=int) == ids and len(ids) == 50
    assert [runs[i].args for i in ids] == [[f"u{i}@example.com"] for i in range(50)]
    assert {r.priority for r in runs.values()} == {3}


def test_dedup_key_inside_a_transaction(app_factory: Callable[..., rota.App], db_url: str) -> None:
    app, welcome = welcome_app(app_factory)
    with caller_connection(db_url) as conn:
        first = welcome.options(connection=conn, key="signup-1").enqueue("a@example.com")
        twin = welcome.options(connection=conn, key="signup-1").enqueue("a@example.com")
        assert first.created and not twin.created and twin.id == first.id
        conn.rollback()
        again = welcome.options(connection=conn, key="signup-1").enqueue("a@example.com")
        assert again.created
        conn.commit()
    outside = welcome.options(key="signup-1").enqueue("a@example.com")
    assert not outside.created and outside.id == again.id
    assert [(r.id, r.key) for r in app.list_runs()] == [(again.id, "signup-1")]


def test_connection_to_another_database_is_refused(
    app_factory: Callable[..., rota.App], db_url: str, tmp_path: Any
) -> None:
    app, welcome = welcome_app(app_factory)
    if db_url.startswith("sqlite"):
        other_url = f"sqlite:///{tmp_path}/other.db"
        make_app(other_url).migrate()  # rota's tables exist there too: still another database
        with caller_connection(other_url) as conn, pytest.raises(rota.ConfigurationError, match="other.db"):
            welcome.options(connection=conn).enqueue("x")
    elif db_url.startswith("mysql"):
        from . import mysql_db
        from .conftest import MYSQL_URL

        with mysql_db.database(MYSQL_URL) as other_url:
            make_app(other_url).migrate()  # rota's tables there too: still another database
            with caller_connection(other_url) as conn, pytest.raises(rota.ConfigurationError, match="not to this app"):
                welcome.options(connection=conn).enqueue("x")
    else:
        with postgres_schema() as other_url:
            with caller_connection(other_url) as conn, pytest.raises(rota.ConfigurationError, match="does not see"):
                welcome.options(connection=conn).enqueue("x")
            other = make_app(other_url)
            other.migrate()
            other.close()
            with caller_connection(other_url) as conn, pytest.raises(rota.ConfigurationError, match="schema"):
                welcome.options(connection=conn).enqueue("x")
    wrong_kind = sqlite3.connect(":memory:") if not db_url.startswith("sqlite") else None
    if wrong_kind is not None:
        store = "mysql" if db_url.startswith("mysql") else "postgresql"
        with pytest.raises(rota.ConfigurationError, match=f"sqlite connection but this app's store is {store}"):
            welcome.options(connection=wrong_kind).enqueue("x")
        wrong_kind.close()
    with pytest.raises(rota.ConfigurationError, match="cannot enqueue on connection 'nope'"):
        welcome.options(connection="nope").enqueue("x")
    assert app.list_runs() == []


@pytest.mark.parametrize("db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
def test_failed_transaction_is_refused_clearly(app_factory: Callable[..., rota.App], db_url: str) -> None:
    app, welcome = welcome_app(app_factory)
    with caller_connection(db_url) as conn:
        with pytest.raises(psycopg.Error):
            conn.execute("SELECT no_such_column FROM signups")
        with pytest.raises(rota.ConfigurationError, match="roll it back"):
            welcome.options(connection=conn).enqueue("x")
        conn.rollback()
    assert app.list_runs() == []


MYSQLCLIENT = "pip install 'rota[mysqlclient]' (it builds against libmariadb-dev or libmysqlclient-dev)"


@pytest.mark.parametrize("db_url", [MYSQL], indirect=True)
def test_a_mysqlclient_connection_enqueues_in_its_transaction(
    app_factory: Callable[..., rota.App], db_url: str
) -> None:
    """mysqlclient (MySQLdb) is Django's MySQL driver: its connection is taken as PyMySQL's is,
    directly and through SQLAlchemy (mysql+mysqldb://). Refused before 0.x."""
    mysqldb = require_module("MySQLdb", MYSQLCLIENT)
    sqlalchemy = pytest.importorskip("sqlalchemy")
    app, welcome = welcome_app(app_factory, poll_interval=WAKE_ONLY)
    start_worker(app)
    time.sleep(0.3)  # the worker is idle, waiting for a wake-up
    parsed = urlparse(db_url)
    conn = mysqldb.connect(
        host=parsed.hostname, port=parsed.port or 3306, user=unquote(parsed.username or ""),
        password=unquote(parsed.password or ""), database=parsed.path.lstrip("/"), charset="utf8mb4",
    )  # fmt: skip
    try:
        cur = conn.cursor()
        cur.execute("CREATE TABLE signups (email TEXT)")
        cur.execute("INSERT INTO signups (email) VALUES (%s)", ("gone@example.com",))
        assert welcome.options(connection=conn).enqueue("gone@example.com").created
        conn.rollback()
        assert app.list_runs() == []
        cur.execute("INSERT INTO signups (email) VALUES (%s)", ("kept@example.com",))
        kept = welcome.options(connection=conn, key="k").enqueue("kept@example.com")
        twin = welcome.options(connection=conn, key="k").enqueue("kept@example.com")
        assert kept.created and (twin.id, twin.created) == (kept.id, False)
        conn.commit()
    finally:
        conn.close()
    assert kept.wait(timeout=10).result == "hello kept@example.com"
    engine = sqlalchemy.create_engine(db_url.replace("mysql://", "mysql+mysqldb://", 1))
    try:
        with engine.begin() as connection:
            also = welcome.options(connection=connection).enqueue("also@example.com")
    finally:
        engine.dispose()
    assert also.wait(timeout=10).status == "succeeded"
    assert signups(db_url) == ["kept@example.com"]


def sqlalchemy_url(url: str) -> str:
    if url.startswith("mysql"):
        return url.replace("mysql://", "mysql+pymysql://", 1)
    return url if url.startswith("sqlite") else url.replace("postgresql://", "postgresql+psycopg://", 1)


def test_sqlalchemy_session_and_connection(app_factory: Callable[..., rota.App], db_url: str) -> None:
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from sqlalchemy.orm import Session

    app, welcome = welcome_app(app_factory, poll_interval=WAKE_ONLY)
    with caller_connection(db_url):
        pass  # creates the signups table
    engine = sqlalchemy.create_engine(sqlalchemy_url(db_url))
    insert = sqlalchemy.text("INSERT INTO signups (email) VALUES (:email)")
    try:
        with Session(engine) as session:
            session.execute(insert, {"email": "gone@example.com"})
            welcome.options(connection=session).enqueue("gone@example.com")
            session.rollback()
        assert app.list_runs() == [] and signups(db_url) == []
        start_worker(app)
        time.sleep(0.3)
        with Session(engine) as session:
            session.execute(insert, {"email": "kept@example.com"})
            kept = welcome.options(connection=session).enqueue("kept@example.com")
            session.commit()
        assert kept.wait(timeout=10).status == "succeeded"
        with engine.connect() as conn:  # a Connection, no transaction begun yet
            many = welcome.enqueue_many([(("c@example.com",), {})], connection=conn)
            conn.commit()
        assert rota.RunHandle(app, many[0]).wait(timeout=10).status == "succeeded"
    finally:
        engine.dispose()
    assert signups(db_url) == ["kept@example.com"]


@pytest.mark.parametrize("db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_dedup_key_across_open_transactions(app_factory: Callable[..., rota.App], db_url: str, outcome: str) -> None:
    """A second transaction enqueueing the same key waits for the first: if it commits, the
    second gets its run (created=False); if it rolls back, the second creates its own."""
    app, welcome = welcome_app(app_factory)
    result: list[rota.RunHandle] = []
    with caller_connection(db_url) as first, caller_connection(db_url) as second:
        mine = welcome.options(connection=first, key="k").enqueue("a")
        waiter = threading.Thread(
            target=lambda: result.append(welcome.options(connection=second, key="k").enqueue("a"))
        )
        waiter.start()
        time.sleep(0.3)
        assert not result  # blocked on the first transaction's uncommitted key
        getattr(first, outcome)()
        waiter.join(10)
        second.commit()
    (theirs,) = result
    if outcome == "commit":
        assert (theirs.id, theirs.created) == (mine.id, False)
    else:
        assert theirs.created and theirs.id != mine.id
    assert [r.id for r in app.list_runs()] == [theirs.id]
