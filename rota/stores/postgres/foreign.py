"""Sessions on a caller's own psycopg connection (enqueue inside the caller's transaction),
refused unless that connection sees this store's rota tables."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg.rows

from ...clock import Clock
from ...errors import ConfigurationError, DatabaseError
from ..sqlstore.base import Row
from .session import _AsyncSession, _reason, _Session, _usable


class PgForeignSessions:
    """The PostgreSQL store's sessions on connections it does not own."""

    queries: dict[str, str]
    clock: Clock | None
    _own_identity: Row | None

    def _read(self) -> Any:
        raise NotImplementedError

    @contextmanager
    def foreign_session(self, conn: psycopg.Connection[Any]) -> Iterator[_Session]:
        """A session on a caller's connection, inside its open transaction (or autocommit,
        if that is how it is used): its commit or rollback decides, and NOTIFY is delivered
        at its commit. Refused unless it sees this store's rota tables."""
        _usable(conn.info.transaction_status)
        try:
            with conn.cursor(row_factory=psycopg.rows.tuple_row) as cur:
                session = _Session(cur, self.queries, self.clock.now() if self.clock is not None else None)
                self._check_identity(session.q("store_identity")[0])
                yield session
        except psycopg.Error as exc:
            raise DatabaseError(f"PostgreSQL (the caller's connection): {_reason(exc)}") from exc

    @contextlib.asynccontextmanager
    async def async_foreign_session(self, conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[_AsyncSession]:
        """`foreign_session` for a psycopg AsyncConnection."""
        _usable(conn.info.transaction_status)
        identity = await asyncio.to_thread(self._identity)
        try:
            async with conn.cursor(row_factory=psycopg.rows.tuple_row) as cur:
                session = _AsyncSession(cur, self.queries, self.clock.now() if self.clock is not None else None)
                self._check_identity((await session.q("store_identity"))[0], identity)
                yield session
        except psycopg.Error as exc:
            raise DatabaseError(f"PostgreSQL (the caller's connection): {_reason(exc)}") from exc

    def _identity(self) -> Row:
        """(database, oid of rota_runs, its schema) as the store's own connections see them."""
        if self._own_identity is None:
            with self._read() as s:
                self._own_identity = tuple(s.q("store_identity")[0])
        return self._own_identity

    def _check_identity(self, theirs: Row, ours: Row | None = None) -> None:
        ours = ours if ours is not None else self._identity()
        if theirs[1] is None:
            raise ConfigurationError(
                f"the connection (database {theirs[0]!r}, search_path {theirs[2]}) does not see rota's "
                f"tables, which live in database {ours[0]!r}, schema {ours[2]!r}: use a connection "
                "to the app's database with that schema on its search_path"
            )
        if (theirs[0], theirs[1]) != (ours[0], ours[1]):
            raise ConfigurationError(
                f"the connection is to database {theirs[0]!r}, schema {theirs[2]!r}, but this app's "
                f"store is database {ours[0]!r}, schema {ours[2]!r}: a run enqueued there would "
                "never be seen by the app's workers"
            )
