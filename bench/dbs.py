"""Fresh databases per run: PostgreSQL databases named bench_*, SQLite files in the run dir."""

from __future__ import annotations

import re
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.core import Ctx, Unsupported

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


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


def recreate_pg(ctx: Ctx, suffix: str = "") -> str:
    """Drop and create this system's bench_* database; returns its URL."""
    return _recreate_db(ctx.pg_url, pg_db_name(ctx.key + suffix))


def drop_pg(ctx: Ctx, suffix: str = "") -> None:
    _drop_db(ctx.pg_url, pg_db_name(ctx.key + suffix))


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
    temporary folder, or the PostgreSQL database `name` (scratch_pg); gone afterwards."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite:///{Path(folder) / (name + '.db')}"
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


DEFAULT_MYSQL_URL = "mysql://root@127.0.0.1:3306/mysql"


@contextmanager
def fresh_mysql(ctx: Ctx, suffix: str = "") -> Iterator[str]:
    """A freshly created bench_* MySQL/MariaDB database for the body (the admin account of
    ROTA_BENCH_MYSQL_URL, default root on this machine), dropped afterwards."""
    import os
    from urllib.parse import unquote, urlparse

    try:
        import pymysql
    except ImportError as exc:  # pragma: no cover - bench venv has it
        raise Unsupported("PyMySQL is not installed") from exc
    admin_url = os.environ.get("ROTA_BENCH_MYSQL_URL", DEFAULT_MYSQL_URL)
    name = pg_db_name(ctx.key + suffix)
    parsed = urlparse(admin_url)
    kwargs = {"host": parsed.hostname, "port": parsed.port or 3306, "user": unquote(parsed.username or "root"),
              "password": unquote(parsed.password or ""), "autocommit": True}  # fmt: skip
    try:
        conn = pymysql.connect(**kwargs)
    except pymysql.Error as exc:
        raise Unsupported(f"MySQL/MariaDB at {parsed.hostname}:{parsed.port or 3306}: {exc}") from exc
    with conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    auth = parsed.netloc.rpartition("@")[0]
    try:
        yield f"mysql://{auth}@{parsed.hostname}:{parsed.port or 3306}/{name}"
    finally:
        with pymysql.connect(**kwargs) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
