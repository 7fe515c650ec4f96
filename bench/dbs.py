"""Fresh databases per run: PostgreSQL and MySQL/MariaDB databases named bench_*, SQLite files
in the run dir."""

from __future__ import annotations

import os
import re
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.core import Ctx, Unsupported

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_MYSQL_URL = "mysql://root@127.0.0.1:3306/mysql"


def pg_db_name(key: str) -> str:
    name = "bench_" + re.sub(r"[^a-z0-9]+", "_", key.lower()).strip("_")
    return name[:63]


def _with_db(url: str, db: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{db}"


def _admin(url: str) -> Any:
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - bench venv has it
        raise Unsupported("psycopg is not installed") from exc
    return psycopg.connect(url, autocommit=True, connect_timeout=5)


def _recreate_db(admin_url: str, name: str) -> str:
    from psycopg import sql

    assert name.startswith("bench_"), name  # never touch anything else
    with _admin(admin_url) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return _with_db(admin_url, name)


def _drop_db(admin_url: str, name: str) -> None:
    from psycopg import sql

    assert name.startswith("bench_"), name
    with _admin(admin_url) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def run_db_name(ctx: Ctx, suffix: str = "") -> str:
    """This run's bench_* database: the system's key and this process's id, so that two
    benches on one server (a shared machine) never drop each other's database."""
    return pg_db_name(f"{ctx.key}{suffix}")[:54] + f"_{os.getpid()}"


def recreate_pg(ctx: Ctx, suffix: str = "") -> str:
    """Drop and create this run's bench_* database; returns its URL."""
    return _recreate_db(ctx.pg_url, run_db_name(ctx, suffix))


def drop_pg(ctx: Ctx, suffix: str = "") -> None:
    _drop_db(ctx.pg_url, run_db_name(ctx, suffix))


@contextmanager
def fresh_pg(ctx: Ctx, suffix: str = "") -> Iterator[str]:
    """A freshly created bench database for the body, dropped afterwards."""
    url = recreate_pg(ctx, suffix)
    try:
        yield url
    finally:
        drop_pg(ctx, suffix)


@contextmanager
def scratch_pg(admin_url: str, name: str) -> Iterator[str]:
    """A freshly created database `name` (bench_*) on the server of `admin_url`, dropped
    afterwards: for scripts outside the runner (the profiles)."""
    url = _recreate_db(admin_url, name)
    try:
        yield url
    finally:
        _drop_db(admin_url, name)


@contextmanager
def scratch_store(backend: str, admin_url: str, name: str) -> Iterator[str]:
    """A fresh rota database URL for a script outside the runner: a new SQLite file in a
    temporary folder, the MySQL/MariaDB database `name` (scratch_mysql: `admin_url` is then
    a mysql:// URL) or the PostgreSQL database `name` (scratch_pg); gone afterwards."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite:///{Path(folder) / (name + '.db')}"
        return
    if backend == "mysql":
        with scratch_mysql(admin_url, name) as url:
            yield url
        return
    with scratch_pg(admin_url, name) as url:
        yield url


def pg_scalar(url: str, query: str) -> Any:
    with _admin(url) as conn:
        row = conn.execute(query).fetchone()
        return row[0] if row else None


class PgProbe:
    """One open autocommit connection for cheap repeated checks during a measurement."""

    def __init__(self, url: str) -> None:
        self._conn = _admin(url)

    def execute(self, query: str) -> None:
        self._conn.execute(query)

    def scalar(self, query: str) -> Any:
        row = self._conn.execute(query).fetchone()
        return row[0] if row else None

    def close(self) -> None:
        self._conn.close()


def _mysql_admin(url: str) -> Any:
    try:
        import pymysql
    except ImportError as exc:  # pragma: no cover - bench venv has it (rota[mysql])
        raise Unsupported("PyMySQL is not installed (pip install 'rota[mysql]')") from exc
    from rota.stores.mysql.session import connect_kwargs

    kwargs = connect_kwargs(url, 5.0, 50)
    kwargs.pop("conv", None)
    return pymysql.connect(**kwargs)


def _mysql_ddl(admin_url: str, *statements: str) -> None:
    conn = _mysql_admin(admin_url)
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
    finally:
        conn.close()


@contextmanager
def fresh_mysql(ctx: Ctx, suffix: str = "") -> Iterator[str]:
    """A freshly created bench_* database on the MySQL/MariaDB server of ctx.mysql_url,
    dropped afterwards (nothing else is touched)."""
    name = run_db_name(ctx, suffix)
    assert name.startswith("bench_"), name
    drop = f"DROP DATABASE IF EXISTS `{name}`"
    _mysql_ddl(ctx.mysql_url, drop, f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    try:
        yield _with_db(ctx.mysql_url, name)
    finally:
        _mysql_ddl(ctx.mysql_url, drop)


@contextmanager
def scratch_mysql(admin_url: str, name: str) -> Iterator[str]:
    """A freshly created database `name` (bench_*) on the MySQL/MariaDB server of
    `admin_url`, dropped afterwards: for scripts outside the runner."""
    assert name.startswith("bench_"), name
    drop = f"DROP DATABASE IF EXISTS `{name}`"
    _mysql_ddl(admin_url, drop, f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    try:
        yield _with_db(admin_url, name)
    finally:
        _mysql_ddl(admin_url, drop)


def mysql_rows(url: str, query: str, *args: Any) -> list[Any]:
    conn = _mysql_admin(url)
    try:
        with conn.cursor() as cur:
            cur.execute(query, args or None)
            return list(cur.fetchall())
    finally:
        conn.close()


def mysql_scalar(url: str, query: str) -> Any:
    rows = mysql_rows(url, query)
    return rows[0][0] if rows else None


def mysql_server_info(url: str) -> dict[str, str]:
    keys = ("version", "innodb_flush_log_at_trx_commit", "sync_binlog", "log_bin", "innodb_buffer_pool_size")
    return {k: str(mysql_scalar(url, f"SELECT @@{k}")) for k in keys}


def fresh_sqlite(ctx: Ctx, name: str = "bench.db") -> Path:
    """A path for a new SQLite database in this run's directory (removed if present)."""
    path = ctx.dir / name
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    return path


def sqlite_scalar(path: Path, query: str) -> Any:
    conn = sqlite3.connect(path, timeout=30)
    try:
        row = conn.execute(query).fetchone()
        return row[0] if row else None
    finally:
        conn.close()


def pg_server_info(url: str) -> dict[str, str]:
    keys = ("server_version", "fsync", "synchronous_commit", "shared_buffers", "max_connections")
    with _admin(url) as conn:
        return {k: str(conn.execute(f"SHOW {k}").fetchone()[0]) for k in keys}
