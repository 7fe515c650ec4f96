"""Stores: one package per backend (postgres/, sqlite/) behind the interface in `base`; what
the SQL backends share is in sqlstore/.

`open_store(url)` picks the backend from the URL scheme."""

from __future__ import annotations

from typing import Any

from ..clock import Clock
from ..config import redact_url
from ..errors import ConfigurationError
from .base import Store

SCHEMES = {"sqlite": "sqlite", "postgresql": "postgres", "postgres": "postgres", "mysql": "mysql", "mariadb": "mysql"}


def redact(url: str) -> str:
    """The URL without its password (userinfo or ?password=), for messages and logs."""
    return redact_url(url)


def open_store(url: str, clock: Clock | None = None, **options: Any) -> Store:
    """A store for `url`: sqlite:///path/to/file.db, postgresql://user@host:port/dbname or
    mysql://user:password@host:port/dbname (mariadb:// too)."""
    if not isinstance(url, str) or "://" not in url:
        shown = redact(url) if isinstance(url, str) else url
        raise ConfigurationError(
            f"invalid database URL {shown!r}: use sqlite:///path/to/file.db or postgresql://user@host:5432/dbname"
        )
    scheme = url.split("://", 1)[0].lower()
    scheme = scheme.split("+", 1)[0]  # tolerate postgresql+psycopg:// from SQLAlchemy habits
    kind = SCHEMES.get(scheme)
    if kind == "sqlite":
        from .sqlite import SQLiteStore

        if options:
            raise ConfigurationError(f"option(s) {sorted(options)} do not apply to SQLite")
        return SQLiteStore(url, clock)
    if kind == "postgres":
        from .postgres import PostgresStore

        return PostgresStore(url.replace("+psycopg", "", 1), clock, **options)
    if kind == "mysql":
        from .mysql import MySQLStore

        return MySQLStore(url, clock, **options)
    raise ConfigurationError(
        f"unsupported database URL scheme {scheme!r} in {redact(url)!r}: rota stores runs in SQLite "
        "(sqlite:///path/to/file.db), PostgreSQL (postgresql://user@host:5432/dbname) or MySQL/MariaDB "
        "(mysql://user:password@host:3306/dbname)"
    )


__all__ = ["Store", "open_store", "redact"]
