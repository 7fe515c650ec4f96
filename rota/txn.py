"""Enqueue inside the caller's transaction: `task.options(connection=conn).enqueue(...)`.

The run is written on the caller's own connection, in whatever transaction it has open, so
the app's row and its run commit or roll back together. Accepted connections:

- a `sqlite3.Connection` to the app's SQLite file;
- a psycopg 3 `Connection` (or, through the async API, an `AsyncConnection`) to the app's
  PostgreSQL database, seeing rota's tables on its search_path;
- a PyMySQL `Connection` to the app's MySQL/MariaDB database, or a mysqlclient (MySQLdb)
  one: Django's MySQL backend's connection (`django.db.connection.connection`);
- a SQLAlchemy `Connection` or `Session` whose driver is one of the above, or (async API) an
  `AsyncConnection`/`AsyncSession` over psycopg (`rota[sqlalchemy]`; a transaction is begun
  on it if none is, as SQLAlchemy's autobegin would).

A connection to another database is refused (ConfigurationError) before anything is written.
Workers hear of a committed run at commit: PostgreSQL delivers the NOTIFY sent inside the
transaction then; SQLite workers see the file change (PRAGMA data_version).
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .errors import ConfigurationError
from .stores.base import NewRun

if TYPE_CHECKING:
    from .app import App

_ACCEPTED = (
    "a sqlite3.Connection, a psycopg Connection (AsyncConnection with the *_async methods), "
    "a PyMySQL or mysqlclient Connection, or a SQLAlchemy Connection or Session"
)


def insert_in(app: App, connection: object, runs: Sequence[NewRun]) -> list[tuple[int, bool]]:
    """Insert `runs` on `connection`, in its open transaction; (id, created) per run."""
    raw = dbapi_connection(connection)
    if is_async_psycopg(raw):
        raise ConfigurationError(
            f"{type(connection).__name__} is an async connection: use `await ....enqueue_async(...)` "
            "or `await ....enqueue_many_async(...)` with it"
        )
    store = app._store
    _check_dialect(store.dialect, raw)
    with store.foreign_session(raw) as session:
        app.store  # noqa: B018 - the schema is up to date (a read once the tables exist)
        return store.insert_runs_in(session, runs)


async def insert_in_async(app: App, connection: object, runs: Sequence[NewRun]) -> list[tuple[int, bool]]:
    """`insert_in` for the async API: awaited on an AsyncConnection (psycopg's, or
    SQLAlchemy's AsyncConnection/AsyncSession over psycopg); a sync connection is used
    directly (it blocks, as every other statement on it does)."""
    raw = await _from_sqlalchemy_async(connection)
    raw = dbapi_connection(raw)
    if not is_async_psycopg(raw):
        return insert_in(app, connection, runs)
    store = app._store
    _check_dialect(store.dialect, raw)
    async with store.async_foreign_session(raw) as session:
        return await store.insert_runs_in_async(session, runs)


def dbapi_connection(connection: object) -> Any:
    """The driver connection behind `connection` (unwrapping SQLAlchemy)."""
    if isinstance(connection, sqlite3.Connection) or _psycopg_kind(connection) is not None or _pymysql(connection):
        return connection
    module = type(connection).__module__
    if module.startswith("sqlalchemy."):
        return _from_sqlalchemy(connection)
    raise ConfigurationError(f"cannot enqueue on connection {connection!r:.80}: pass {_ACCEPTED}")


def _pymysql(connection: object) -> bool:
    """A PyMySQL connection, or mysqlclient's (MySQLdb: Django's MySQL driver), which takes the
    same %(name)s parameters and writes a list as (a, b, ...) too."""
    for name in ("pymysql.connections", "MySQLdb.connections"):
        module = sys.modules.get(name)  # (not imported: no connection of its can exist)
        if module is not None and isinstance(connection, module.Connection):
            return True
    return False


def is_async_psycopg(raw: object) -> bool:
    return _psycopg_kind(raw) == "async"


def _psycopg_kind(connection: object) -> str | None:
    if not type(connection).__module__.startswith("psycopg"):
        return None
    import psycopg

    if isinstance(connection, psycopg.AsyncConnection):
        return "async"
    if isinstance(connection, psycopg.Connection):
        return "sync"
    return None


def _from_sqlalchemy(connection: object) -> Any:
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session

    if isinstance(connection, Session):
        connection = connection.connection()  # joins (or begins) the session's transaction
    if not isinstance(connection, Connection):
        raise ConfigurationError(f"cannot enqueue on {type(connection).__name__}: pass {_ACCEPTED}")
    if not connection.in_transaction():
        connection.begin()  # what SQLAlchemy's autobegin does at the first statement
    raw = connection.connection.dbapi_connection
    if isinstance(raw, sqlite3.Connection) or _psycopg_kind(raw) == "sync" or _pymysql(raw):
        return raw
    raise ConfigurationError(
        f"the SQLAlchemy connection uses the driver {type(raw).__module__}.{type(raw).__name__}; "
        "rota enqueues through sqlite3 (sqlite://), psycopg 3 (postgresql+psycopg://), PyMySQL "
        "(mysql+pymysql://) or mysqlclient (mysql+mysqldb://)"
    )


async def _from_sqlalchemy_async(connection: object) -> object:
    """The psycopg AsyncConnection behind a SQLAlchemy AsyncSession/AsyncConnection (others
    pass through unchanged)."""
    if not type(connection).__module__.startswith("sqlalchemy.ext.asyncio"):
        return connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    if isinstance(connection, AsyncSession):
        connection = await connection.connection()  # joins (or begins) the session's transaction
    if not isinstance(connection, AsyncConnection):
        raise ConfigurationError(f"cannot enqueue on {type(connection).__name__}: pass {_ACCEPTED}")
    if not connection.in_transaction():
        await connection.begin()
    raw = (await connection.get_raw_connection()).driver_connection
    if _psycopg_kind(raw) != "async":
        raise ConfigurationError(
            f"the SQLAlchemy async connection uses the driver {type(raw).__module__}.{type(raw).__name__}; "
            "rota enqueues asynchronously through psycopg 3 (postgresql+psycopg://)"
        )
    return raw


def _check_dialect(dialect: str, raw: object) -> None:
    kind = "sqlite" if isinstance(raw, sqlite3.Connection) else "mysql" if _pymysql(raw) else "postgresql"
    if kind != dialect:
        wanted = {"sqlite": "a sqlite3 connection", "mysql": "a PyMySQL or mysqlclient connection"}.get(
            dialect, "a psycopg connection"
        )
        raise ConfigurationError(
            f"the connection is a {kind} connection but this app's store is {dialect}: pass {wanted} "
            "to the app's database"
        )
