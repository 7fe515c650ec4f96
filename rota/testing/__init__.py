"""Helpers for testing code that uses rota: run what is due inline, check what was enqueued,
call a handler directly, point an App at a test database. The pytest plugin
(rota.testing.plugin, loaded automatically when rota is installed) adds the fixtures
`rota_app`, `rota_clock`, `rota_bind` and `rota_database_url`.

    def test_signup_sends_welcome(app):
        signup("a@b.c")
        run = rota.testing.assert_enqueued(app, send_welcome, "a@b.c")
        rota.testing.run_pending(app)
        assert app.get_run(run.id).status == "succeeded"

Use a `rota.FakeClock` (`App(..., clock=clock)`) to move time for delayed runs, retries
and schedules: `clock.advance(hours=1); run_pending(app)`.

Code that enqueues inside its own psycopg transaction needs the App on PostgreSQL: bind it
to a fresh schema, `with postgres_schema(url) as test_url, bind(app, test_url, clock): ...`,
and give the code under test `test_url` for its own connections (docs/how-to/testing.md);
on MySQL/MariaDB, a fresh database: `mysql_database(url)`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from ..app import App
from ..clock import FakeClock
from ..models import Run
from ..serialization import encode_arguments, encode_result
from ..stores import open_store
from ..tasks import RunContext, Task

__all__ = [
    "FakeClock",
    "assert_enqueued",
    "assert_not_enqueued",
    "bind",
    "call",
    "fake_context",
    "mysql_database",
    "postgres_schema",
    "run_pending",
]


def run_pending(app: App, *, concurrency: int = 1) -> int:
    """Execute every run that is due now (materializing due schedule ticks first) in this
    process, until nothing is due; return how many ran. Runs due later (delays, retry
    backoff) stay pending until the clock reaches them."""
    worker = app.worker(concurrency=concurrency, install_signal_handlers=False, flush_interval=0)
    return asyncio.run(worker.run_until_idle())


def assert_enqueued(app: App, task: Task[..., Any] | str, *args: Any, **kwargs: Any) -> Run:
    """The pending run of `task` called with exactly these arguments, or AssertionError
    listing the pending runs of that task."""
    name = task if isinstance(task, str) else task.name
    pending = app.list_runs(status="pending", task=name, limit=1000)
    for run in pending:
        if run.args == list(args) and run.kwargs == kwargs:
            return run
    seen = "\n".join(f"  run {r.id}: args={r.args} kwargs={r.kwargs}" for r in pending) or "  (none)"
    raise AssertionError(
        f"no pending run of {name} with args={list(args)} kwargs={kwargs}; pending runs of {name}:\n{seen}"
    )


def assert_not_enqueued(app: App, task: Task[..., Any] | str, *args: Any, **kwargs: Any) -> None:
    """No pending run of `task` with exactly these arguments; with no arguments given, no
    pending run of `task` at all. AssertionError lists the offending runs."""
    name = task if isinstance(task, str) else task.name
    pending = app.list_runs(status="pending", task=name, limit=1000)
    if args or kwargs:
        pending = [r for r in pending if r.args == list(args) and r.kwargs == kwargs]
    if pending:
        seen = "\n".join(f"  run {r.id}: args={r.args} kwargs={r.kwargs}" for r in pending)
        which = f" with args={list(args)} kwargs={kwargs}" if args or kwargs else ""
        raise AssertionError(f"expected no pending run of {name}{which}, found:\n{seen}")


def fake_context(
    task: Task[..., Any] | str,
    *,
    run_id: str = "1",
    attempt: int = 1,
    max_attempts: int | None = None,
    token: int = 1,
    scheduled_for: datetime | None = None,
    schedule: str | None = None,
    cancelled: bool = False,
    parents: dict[str, Any] | None = None,
    connection: Any = None,
) -> RunContext:
    """A RunContext as a worker would pass it (for handlers declared with pass_context=True);
    `parents` is what `ctx.parents` returns (parent run id -> result, for after= runs);
    `connection` is what `ctx.connection` returns (for transactional=True handlers)."""
    name = task if isinstance(task, str) else task.name
    if max_attempts is None:
        max_attempts = task.opts.retries + 1 if isinstance(task, Task) else attempt
    cancel = threading.Event()
    if cancelled:
        cancel.set()
    when = scheduled_for or datetime.now(UTC)
    context = RunContext(
        run_id, name, attempt, max_attempts, token, when, schedule, cancel, parents=dict(parents or {})
    )
    context._connection = connection
    return context


def call(
    task: Task[..., Any], *args: Any, context: RunContext | None = None, connection: Any = None, **kwargs: Any
) -> Any:
    """Run one task's handler here, as a worker would: arguments and result go through JSON
    (a value the queue could not carry fails the same way), a handler with pass_context=True
    gets `context` (default: `fake_context(task)`), an async handler is awaited.

    A transactional=True handler gets `ctx.connection`: `connection` if given (e.g. Django's
    `connection.connection` inside the test's transaction), else a transaction on the task's
    App database, committed when the handler returns and rolled back when it raises."""
    if task.opts.transactional and (context is None or context._connection is None) and connection is None:
        with task.app._store.handler_transaction() as tx:
            return call(task, *args, context=context, connection=tx.connection, **kwargs)
    args_text, kwargs_text = encode_arguments(task.name, args, kwargs, task.fn, int(task.opts.pass_context))
    decoded_args, decoded_kwargs = json.loads(args_text), json.loads(kwargs_text)
    if task.opts.pass_context:
        context = context or fake_context(task)
        if connection is not None:
            context._connection = connection
        decoded_args.insert(0, context)
    result = task.fn(*decoded_args, **decoded_kwargs)
    if task.is_async:
        result = asyncio.run(result)
    return json.loads(encode_result(task.name, result))


@contextlib.contextmanager
def bind(app: App, database_url: str, clock: FakeClock | None = None) -> Iterator[App]:
    """Point an existing App (with its tasks, schedules and hooks) at another database and
    clock for the duration; restored (and the test database's connections closed) afterwards.

        with rota.testing.bind(myproject.tasks.app, "sqlite:///tmp/t.db", rota.FakeClock()) as app:
            ...

    `database_url` is any URL the App accepts: a temporary SQLite file, or a PostgreSQL
    database or schema (see `postgres_schema`). rota's tables are created at once, so the
    code under test's own connections see them (a transactional enqueue needs them)."""
    saved = (app.database_url, app.clock, app._store, app._ready)
    app.events.close()
    app.database_url, app.clock = database_url, clock
    app._store, app._ready = open_store(database_url, clock, **app._store_options), False
    try:
        app.store  # noqa: B018 - migrates the test database now
        yield app
    finally:
        app.close()
        app.database_url, app.clock, app._store, app._ready = saved


@contextlib.contextmanager
def postgres_schema(database_url: str, *, prefix: str = "rota_test") -> Iterator[str]:
    """A fresh, empty PostgreSQL schema in the database of `database_url`, dropped (with
    everything in it) afterwards. Yields a URL whose `search_path` is that schema: pass it to
    `bind` (or override the `rota_database_url` fixture with it), and to the code under test
    for its own psycopg connections, so its tables and rota's live side by side and a
    transactional enqueue (`task.options(connection=conn)`) sees the App's tables.

        with rota.testing.postgres_schema("postgresql://app@127.0.0.1:5432/myapp_test") as url:
            ...

    Name a database your tests may write to, never production's: only the new schema is
    touched. Needs psycopg (`pip install 'rota[postgres]'`)."""
    import psycopg

    if not database_url.startswith(("postgresql://", "postgres://")):
        raise ValueError(f"{database_url!r} is not a postgresql:// URL")
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    separator = "&" if "?" in database_url else "?"
    url = f"{database_url}{separator}options={quote(f'-csearch_path={schema}')}"
    try:
        yield url
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@contextlib.contextmanager
def mysql_database(server_url: str, *, prefix: str = "rota_test") -> Iterator[str]:
    """A fresh, empty MySQL/MariaDB database on the server of `server_url` (a mysql:// URL
    naming any database there, of an account that may CREATE and DROP databases), dropped
    (with everything in it) afterwards. Yields the URL of the same account on the new
    database: pass it to `bind` (or override the `rota_database_url` fixture with it), and to
    the code under test for its own connections (a transactional enqueue sees the App's tables).

        with rota.testing.mysql_database("mysql://root@127.0.0.1:3306/mysql") as url:
            ...

    MySQL's counterpart of `postgres_schema` (a MySQL schema is a database). Needs PyMySQL
    (`pip install 'rota[mysql]'`)."""
    if not server_url.startswith(("mysql://", "mariadb://")):
        raise ValueError(f"{server_url!r} is not a mysql:// URL")
    import pymysql

    from ..stores.mysql.session import connect_kwargs

    kwargs = {k: v for k, v in connect_kwargs(server_url, 5, 5).items() if k not in ("database", "conv")}
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"

    def execute(sql: str) -> None:
        conn = pymysql.connect(**kwargs)
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
        finally:
            conn.close()

    execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    try:
        yield urlunsplit(urlsplit(server_url)._replace(path=f"/{name}"))
    finally:
        execute(f"DROP DATABASE IF EXISTS `{name}`")
