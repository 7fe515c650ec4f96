"""MySQL's transactional handlers (rota.transactional; what they share:
rota/stores/sqlstore/handler_tx.py): a connection of its own per attempt, outside the pool,
READ COMMITTED in UTC as the store's, one transaction from before the handler to its commit."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pymysql.connections import Connection
from pymysql.constants import SERVER_STATUS

from ...errors import ConfigurationError
from ..sqlstore.handler_tx import _ENDED, RefusesToEnd, _commit_error
from .session import DriverError, Session, keepalive, translate

if TYPE_CHECKING:
    from .store import MySQLStore


class _HandlerConnection(RefusesToEnd, Connection):
    """A PyMySQL connection whose commit()/rollback() refuse: the transaction is rota's."""


def _in_transaction(conn: Connection[Any]) -> bool:
    return bool(getattr(conn, "server_status", 0) & SERVER_STATUS.SERVER_STATUS_IN_TRANS)


class MySQLHandlerTx:
    __slots__ = ("connection", "store")

    def __init__(self, store: MySQLStore, connection: Connection[Any]) -> None:
        self.store = store
        self.connection = connection

    def succeed(self, run_id: int, token: int, result: str | None) -> bool:
        """The run's success, token-checked, in the handler's transaction (what it ends, such
        as dependents, settled in it too)."""
        if not _in_transaction(self.connection):
            raise ConfigurationError(_ENDED)
        store = self.store
        now = store._ts(store.clock.now()) if store.clock is not None else None
        session = Session(self.connection, store.queries, now, True, store._settle_hook())
        try:
            return bool(session.q("finish_transactional", id=run_id, token=token, result=result))
        except DriverError as exc:
            raise translate(exc, store.url, store.max_packet) from exc
        finally:
            session.cur.close()


@contextmanager
def mysql_handler_tx(store: MySQLStore) -> Iterator[MySQLHandlerTx]:
    """A new connection (autocommit off, READ COMMITTED), BEGIN, the handler, COMMIT; a
    failure at the commit is CommitUnknown when it is transient (the run's row tells)."""
    try:
        conn = _HandlerConnection(**{**store.connect_options(), "autocommit": False})
        keepalive(conn)
        with conn.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        conn.begin()
    except DriverError as exc:
        raise translate(exc, store.url, store.max_packet) from exc
    try:
        yield MySQLHandlerTx(store, conn)
        try:
            Connection.commit(conn)
        except DriverError as exc:
            raise _commit_error(translate(exc, store.url, store.max_packet)) from exc
    finally:
        if conn.open and _in_transaction(conn):
            with contextlib.suppress(DriverError):
                Connection.rollback(conn)
        with contextlib.suppress(Exception):
            conn.close()
