"""The stores' side of transactional handlers (rota.transactional): one transaction per
attempt on a connection of the store's own database. The handler writes on the connection;
`succeed` records the run's success, token-checked, in the same transaction; the context
manager commits when the handler's block ends normally and rolls back when it raises.

Failures of rota's own statements: one that opens or begins the transaction (before the
handler runs) or records its success is raised as the store's DatabaseError (DatabaseTransient
for an outage); a transient one at the commit as CommitUnknown (the commit may or may not have happened: the
run's row tells, rota.transactional reads it back)."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError, DatabaseError, DatabaseTransient

if TYPE_CHECKING:
    import psycopg

    from .postgres import PostgresStore
    from .sqlite import SQLiteStore

_ENDED = (
    "the handler ended ctx.connection's transaction itself (COMMIT or ROLLBACK): rota commits it "
    "together with the run's success, so a transactional handler must not; use SAVEPOINTs to undo part of it"
)


class CommitUnknown(DatabaseTransient):
    """The commit of a transactional handler's transaction failed transiently (a connection
    cut while committing): whether it committed is unknown until the run's row is read."""


def _commit_error(error: DatabaseError) -> DatabaseError:
    if isinstance(error, DatabaseTransient):
        return CommitUnknown(f"committing a transactional handler's transaction (outcome unknown): {error}")
    return DatabaseError(f"committing a transactional handler's transaction: {error}")


class _HandlerConnection(sqlite3.Connection):
    """A sqlite3.Connection whose commit()/rollback() refuse: the transaction is rota's."""

    def commit(self) -> None:
        raise ConfigurationError(_ENDED.replace("ended", "called commit() on"))

    def rollback(self) -> None:
        raise ConfigurationError(_ENDED.replace("ended", "called rollback() on"))


class SQLiteHandlerTx:
    __slots__ = ("connection", "store")

    def __init__(self, store: SQLiteStore, connection: sqlite3.Connection) -> None:
        self.store = store
        self.connection = connection

    def succeed(self, run_id: int, token: int, result: str | None) -> bool:
        if not self.connection.in_transaction:
            raise ConfigurationError(_ENDED)
        from ._sqlite_conn import _translate

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
    from ._sqlite_conn import _translate

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


class PostgresHandlerTx:
    __slots__ = ("connection", "store")

    def __init__(self, store: PostgresStore, connection: psycopg.Connection[Any]) -> None:
        self.store = store
        self.connection = connection

    def succeed(self, run_id: int, token: int, result: str | None) -> bool:
        import psycopg

        if self.connection.info.transaction_status != psycopg.pq.TransactionStatus.INTRANS:
            raise ConfigurationError(_ENDED)
        from ._pg_session import _translate

        now = self.store.clock.now() if self.store.clock is not None else None
        params = {"id": run_id, "token": token, "result": result, "now": now}
        try:
            with self.connection.cursor(row_factory=psycopg.rows.tuple_row) as cur:
                cur.execute(self.store.queries["finish_transactional"], params)
                return bool(cur.fetchall())
        except psycopg.Error as exc:  # (a broken connection's transaction is not ended again)
            raise _translate(exc, self.store.url) from exc


# What DISCARD ALL does, but for the statements psycopg prepared itself (`from_sql` false):
# psycopg keeps naming them in its cache, and it misses a DISCARD ALL it has counted before
# (psycopg 3.3: it looks at a statement's status only the first time it sees its text), so a
# later run's statement went to "_pg3_0" after the server had dropped it (issue 41). The
# first statement lists the handler's own PREPAREs, which `put` deallocates by name.
_RESET = (
    "SELECT name FROM pg_prepared_statements WHERE from_sql; "
    "CLOSE ALL; SET SESSION AUTHORIZATION DEFAULT; RESET ALL; UNLISTEN *; "
    "SELECT pg_advisory_unlock_all(); DISCARD PLANS; DISCARD TEMP; DISCARD SEQUENCES"
)


class PostgresHandlerConnections:
    """Idle connections for transactional handlers, apart from the store's pool (a handler
    may hold one for as long as it runs; the worker's own statements must not wait for it).
    A connection is reset (as DISCARD ALL would, see _RESET) before it is reused."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self._idle: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()
        self._closed = False

    def get(self) -> psycopg.Connection[Any]:
        import psycopg

        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if not conn.closed and not conn.broken:
                    return conn
        from ._pg_session import _connect_kwargs

        store = self.store
        kwargs = _connect_kwargs(store.url, store.connect_timeout, store.pooled)
        if store.pooled:  # no startup options through PgBouncer (it keeps TimeZone; the rest per transaction)
            conn = psycopg.connect(store.url, **kwargs)
            conn.execute("SET TIME ZONE 'UTC'")
            return conn
        given = psycopg.conninfo.conninfo_to_dict(store.url).get("options") or ""
        settings = {"TimeZone": "UTC", **{k: v.strip("'") for k, v in store._settings.items()}}
        kwargs["options"] = " ".join([str(given), *(f"-c {k}={v}" for k, v in settings.items())]).strip()
        return psycopg.connect(store.url, **kwargs)

    def put(self, conn: psycopg.Connection[Any]) -> None:
        import psycopg

        idle = psycopg.pq.TransactionStatus.IDLE
        try:
            if conn.broken or conn.closed or conn.info.transaction_status != idle:
                raise psycopg.InterfaceError("not reusable")
            conn.row_factory = psycopg.rows.tuple_row
            if self.store.pooled:  # its session state is the pooler's, never the same twice
                return self._keep(conn)
            mine = conn.execute(_RESET, prepare=False).fetchall()  # one round trip
            for (name,) in mine:  # the handler's own PREPAREs (rare)
                conn.execute(psycopg.sql.SQL("DEALLOCATE {}").format(psycopg.sql.Identifier(name)), prepare=False)
        except psycopg.Error:
            conn.close()
            return
        self._keep(conn)

    def _keep(self, conn: psycopg.Connection[Any]) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self.store.pool_size:
                self._idle.append(conn)
                return
        conn.close()

    def drop_idle(self) -> None:
        """Close the idle connections: the store dropped its pool (a failover, a read-only
        server: see _pg_failover), and these most likely reach the same server."""
        with self._lock:
            conns, self._idle = self._idle, []
        for conn in conns:
            conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True  # a handler still running closes its connection when it ends
            conns, self._idle = self._idle, []
        for conn in conns:
            conn.close()


@contextmanager
def postgres_handler_tx(store: PostgresStore, conns: PostgresHandlerConnections) -> Iterator[PostgresHandlerTx]:
    """A transaction block (`conn.transaction()`: an explicit commit() inside it raises) on a
    connection of its own; row locks the handler takes last until its commit."""
    import psycopg

    from ._pg_failover import read_only
    from ._pg_session import _translate

    try:
        conn = conns.get()
    except psycopg.Error as exc:
        raise _translate(exc, store.url) from exc
    began = committing = False
    try:
        try:
            with conn.transaction():  # BEGIN (a pooled connection may have been cut meanwhile)
                began = True
                if store.pooled and store._local is not None:  # the store's timeouts, for this one
                    conn.execute(store._local)
                yield PostgresHandlerTx(store, conn)
                committing = True
        except psycopg.Error as exc:
            if read_only(exc):  # never back to the pool: see _pg_failover
                conn.close()
                conns.drop_idle()
            if not began:  # the handler did not run: the store's error, transient for an outage
                raise _translate(exc, store.url) from exc
            if not committing:
                raise  # the handler's own error, as it raised it (retry_on may name its type)
            raise _commit_error(_translate(exc, store.url)) from exc
    finally:
        conns.put(conn)
