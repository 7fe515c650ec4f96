"""PostgreSQL's transactional handlers (rota.transactional; what they share: rota/stores/sqlstore/handler_tx.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ...errors import ConfigurationError
from ..forks import track
from ..sqlstore.handler_tx import _ENDED, _commit_error

if TYPE_CHECKING:
    import psycopg

    from .store import PostgresStore


class PostgresHandlerTx:
    __slots__ = ("connection", "store")

    def __init__(self, store: PostgresStore, connection: psycopg.Connection[Any]) -> None:
        self.store = store
        self.connection = connection

    def succeed(self, run_id: int, token: int, result: str | None) -> bool:
        import psycopg

        if self.connection.info.transaction_status != psycopg.pq.TransactionStatus.INTRANS:
            raise ConfigurationError(_ENDED)
        from .session import _translate

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
        from .session import _connect_kwargs

        store = self.store
        kwargs = _connect_kwargs(store.url, store.connect_timeout, store.pooled)
        if store.pooled:  # no startup options through PgBouncer (it keeps TimeZone; the rest per transaction)
            conn = track(psycopg.connect(store.url, **kwargs))
            conn.execute("SET TIME ZONE 'UTC'")
            return conn
        given = psycopg.conninfo.conninfo_to_dict(store.url).get("options") or ""
        settings = {"TimeZone": "UTC", **{k: v.strip("'") for k, v in store._settings.items()}}
        kwargs["options"] = " ".join([str(given), *(f"-c {k}={v}" for k, v in settings.items())]).strip()
        return track(psycopg.connect(store.url, **kwargs))

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

    def after_fork(self) -> None:
        """In a forked child (rota.stores.forks): the idle connections are the parent's."""
        self._idle, self._lock = [], threading.Lock()

    def drop_idle(self) -> None:
        """Close the idle connections: the store dropped its pool (a failover, a read-only
        server: see failover.py), and these most likely reach the same server."""
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

    from .failover import read_only
    from .session import _translate

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
            if read_only(exc):  # never back to the pool: see failover.py
                conn.close()
                conns.drop_idle()
            if not began:  # the handler did not run: the store's error, transient for an outage
                raise _translate(exc, store.url) from exc
            if not committing:
                raise  # the handler's own error, as it raised it (retry_on may name its type)
            raise _commit_error(_translate(exc, store.url)) from exc
    finally:
        conns.put(conn)
