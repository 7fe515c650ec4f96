"""SQLite's transactional handlers (rota.transactional; what they share: rota/stores/sqlstore/handler_tx.py)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ...errors import ConfigurationError
from ..sqlstore.handler_tx import _ENDED, RefusesToEnd, _commit_error

if TYPE_CHECKING:
    from .store import SQLiteStore


class _HandlerConnection(RefusesToEnd, sqlite3.Connection):
    """A sqlite3.Connection whose commit()/rollback() refuse: the transaction is rota's."""


class SQLiteHandlerTx:
    __slots__ = ("connection", "store")

    def __init__(self, store: SQLiteStore, connection: sqlite3.Connection) -> None:
        self.store = store
        self.connection = connection

    def succeed(self, run_id: int, token: int, result: str | None) -> bool:
        if not self.connection.in_transaction:
            raise ConfigurationError(_ENDED)
        from .connection import _translate

        sql = self.store.queries["finish_transactional"]
        params = {"id": run_id, "token": token, "result": result, "now": self.store._now()}
        try:
            return bool(self.connection.execute(sql, params).fetchall())
        except sqlite3.Error as exc:
            raise _translate(exc, self.store.path) from exc


@contextmanager
def sqlite_handler_tx(store: SQLiteStore) -> Iterator[SQLiteHandlerTx]:
    """BEGIN IMMEDIATE on a new connection to the store's file: the handler holds the
    file's write lock from its start to its commit (other writers wait, up to their busy
    timeout), so nothing else can change the run in between."""
    from .connection import _translate

    try:
        conn = sqlite3.connect(store.path, isolation_level=None, timeout=store.busy_timeout, factory=_HandlerConnection)
        conn.execute(f"PRAGMA synchronous={store.synchronous.upper()}")
        conn.execute("PRAGMA recursive_triggers=ON")  # dependents' cancellation cascades (0010)
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        raise _translate(exc, store.path) from exc
    try:
        yield SQLiteHandlerTx(store, conn)
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise _commit_error(_translate(exc, store.path)) from exc
    finally:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        conn.close()
