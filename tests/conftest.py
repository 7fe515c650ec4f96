"""Fixtures shared by every suite.

`db_url` runs a test once per store: SQLite (a file in tmp_path) and PostgreSQL (a fresh
schema per test in the database named by ROTA_TEST_POSTGRES_URL); the suites that pass on
MySQL/MariaDB override it with WITH_MYSQL (a fresh database per test, ROTA_TEST_MYSQL_URL). Without a PostgreSQL or
Redis server those tests skip with one line saying how to enable them; under CI=true they
fail instead, so CI can never skip them silently.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

import rota
from rota.redaction import forget_secrets

from .procs import WorkerProcs

PG_URL = os.environ.get("ROTA_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("ROTA_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
# A MySQL/MariaDB account that may create databases (the tests make one per test and a user of
# their own, rota_test, that owns only those): root over TCP on this machine.
MYSQL_URL = os.environ.get("ROTA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/mysql")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@functools.cache
def postgres_problem() -> str | None:
    try:
        import psycopg

        psycopg.connect(PG_URL, connect_timeout=3).close()
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    return None


@functools.cache
def redis_problem() -> str | None:
    try:
        import redis

        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


@functools.cache
def mysql_problem() -> str | None:
    try:
        from tests import mysql_db

        mysql_db.admin(MYSQL_URL).close()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


_SERVICES = {
    "postgres": (postgres_problem, "ROTA_TEST_POSTGRES_URL", lambda: PG_URL),
    "redis": (redis_problem, "ROTA_TEST_REDIS_URL", lambda: REDIS_URL),
    "mysql": (mysql_problem, "ROTA_TEST_MYSQL_URL", lambda: MYSQL_URL),
}


def require(service: str) -> None:
    check, env, where = _SERVICES[service]
    problem = check()
    if problem is None:
        return
    url = where()
    message = f"{service} at {url} is unavailable ({problem}); start it or set {env} to enable these tests"
    if IN_CI:
        pytest.fail(f"CI=true but {message}", pytrace=False)
    pytest.skip(message)


def require_module(name: str, install: str) -> Any:
    """The module `name`, imported; without it the test skips in one line saying how to
    install it (under CI=true it fails instead: CI installs it, .ci/run)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        message = f"{name} is not installed ({exc}); {install} to enable these tests"
        if IN_CI:
            pytest.fail(f"CI=true but {message}", pytrace=False)
        pytest.skip(message)


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = []
    for service, problem, env in (
        ("PostgreSQL", postgres_problem(), "ROTA_TEST_POSTGRES_URL"),
        ("Redis", redis_problem(), "ROTA_TEST_REDIS_URL"),
        ("MySQL/MariaDB", mysql_problem(), "ROTA_TEST_MYSQL_URL"),
    ):
        if problem:
            lines.append(f"{service} tests will skip: {problem}. Set {env} to a running server to enable them.")
    return lines


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist other tests run beside each one: a test marked `alone` (it restarts
    a shared server) skips there. `make pytest` runs the suite on parallel processes, then the
    `alone` tests by themselves."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    skip = pytest.mark.skip(reason="runs alone (it disturbs other tests): `make pytest` runs it after the rest")
    for item in items:
        if item.get_closest_marker("alone"):
            item.add_marker(skip)


@contextlib.contextmanager
def postgres_schema() -> Iterator[str]:
    """A fresh schema; yields a URL whose search_path points at it. Dropped afterwards."""
    import psycopg

    schema = f"rota_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    separator = "&" if "?" in PG_URL else "?"
    url = f"{PG_URL}{separator}options={quote(f'-csearch_path={schema}')}"
    try:
        yield url
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
# The MySQL/MariaDB store (tests/mysql_db.py: a database of its own per test). The suites that
# pass on it run it too (WITH_MYSQL); docs/deploy.md lists those that do not yet.
MYSQL = pytest.param("mysql", marks=pytest.mark.mysql)
WITH_MYSQL = [*STORES, MYSQL]
# The contract and crash suites run a third time through a PgBouncer of their own in
# transaction mode (tests/pgbouncer.py): their modules override db_url with these params.
THROUGH_BOUNCER = [*STORES, pytest.param("postgres-bouncer", marks=pytest.mark.postgres)]


def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """The URL of an empty database of the store `request.param` names. For
    `postgres-bouncer`: a fresh schema reached through a transaction-mode PgBouncer, with
    ROTA_POOLER=transaction and ROTA_LISTEN_URL (the direct URL, for wake-ups) set for the
    test and the worker processes it starts. A test marked `not_through_pooler(reason)`
    skips there, saying why; without pgbouncer the test skips in one line (fails in CI)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/rota.db"
        return
    if request.param == "mysql":
        from tests import mysql_db

        require("mysql")
        with mysql_db.database(MYSQL_URL) as url:
            yield url
        return
    require("postgres")
    if request.param == "postgres":
        with postgres_schema() as url:
            yield url
        return
    yield from _through_bouncer(request)


def require_pgbouncer() -> None:
    """Skip in one line without pgbouncer; under CI=true, fail instead."""
    from . import pgbouncer

    problem = pgbouncer.missing()
    if problem is not None:
        if IN_CI:
            pytest.fail(f"CI=true but {problem}", pytrace=False)
        pytest.skip(problem)


def _through_bouncer(request: pytest.FixtureRequest, settings: bool = True) -> Iterator[str]:
    """A fresh schema through a PgBouncer of its own (see store_url); `settings`: with
    ROTA_POOLER and ROTA_LISTEN_URL set while it lasts."""
    from . import pgbouncer

    require("postgres")
    marker = request.node.get_closest_marker("not_through_pooler")
    if marker is not None:
        pytest.skip(f"not through a transaction pooler: {marker.args[0]}")
    require_pgbouncer()
    monkeypatch = pytest.MonkeyPatch()
    try:
        with postgres_schema() as direct, pgbouncer.start_bouncer(PG_URL, direct.rsplit("search_path%3D", 1)[1]) as url:
            if settings:
                monkeypatch.setenv("ROTA_POOLER", "transaction")
                monkeypatch.setenv("ROTA_LISTEN_URL", direct)
            yield url
    finally:
        monkeypatch.undo()


@pytest.fixture(autouse=True)
def _forget_secrets() -> Iterator[None]:
    """The passwords an App remembered for redaction stay with its test (rota.redaction)."""
    yield
    forget_secrets()


@pytest.fixture(params=STORES)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """The URL of an empty database, once per store."""
    yield from store_url(request, tmp_path)


@pytest.fixture
def pg_url() -> Iterator[str]:
    require("postgres")
    with postgres_schema() as url:
        yield url


@pytest.fixture
def redis_url() -> str:
    require("redis")
    return REDIS_URL


def make_app(url: str, **options: Any) -> rota.App:
    defaults: dict[str, Any] = {
        "poll_interval": 0.05,
        "lease": 3.0,
        "shutdown_timeout": 5.0,
        "retention": None,
    }
    defaults.update(options)
    return rota.App(url, **defaults)


@pytest.fixture
def procs(db_url: str, tmp_path: Path) -> Iterator[WorkerProcs]:
    """Worker processes on the test database (stopped afterwards); handlers of the test apps
    log their starts and ends to tmp_path/executions.log (ROTA_TEST_LOG)."""
    workers = WorkerProcs(db_url, tmp_path)
    workers.env["ROTA_TEST_LOG"] = str(tmp_path / "executions.log")
    yield workers
    workers.stop_all()


@pytest.fixture
def app_factory(db_url: str) -> Iterator[Callable[..., rota.App]]:
    """Apps on the test database; closed (and their workers stopped) afterwards."""
    apps: list[rota.App] = []

    def factory(**options: Any) -> rota.App:
        app = make_app(options.pop("url", db_url), **options)
        apps.append(app)
        return app

    yield factory
    for app in apps:
        for worker in list(app._workers):
            worker.stop(wait=True, timeout=10)
        app.close()


@pytest.fixture
def app(app_factory: Callable[..., rota.App]) -> rota.App:
    return app_factory()


@pytest.fixture
def clock() -> rota.FakeClock:
    return rota.FakeClock()


def start_worker(app: rota.App, **options: Any) -> rota.Worker:
    """A worker on a background thread (stopped by the app fixture's teardown)."""
    options.setdefault("install_signal_handlers", False)
    worker = app.worker(**options)
    worker.start()
    return worker


def wait_for(condition: Callable[[], bool], timeout: float = 15.0, what: str = "condition", step: float = 0.02) -> None:
    """Until `condition()` holds (looked at every `step` seconds); an AssertionError naming
    `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)
