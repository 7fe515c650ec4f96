"""The PostgreSQL store: the engine when workers span hosts.

Claims are one statement (a CTE selecting due runs `FOR UPDATE SKIP LOCKED`, so concurrent
claimers never wait on each other nor take the same run, and the LIMIT bounds the rows
updated); batch writes pass arrays and `unnest` them; a new run due soon sends `NOTIFY rota`
in its transaction so idle workers wake at commit. "Now" is `now()` on the server (one clock
for every host) unless a clock is configured. Connections come from a psycopg pool in
autocommit mode; transactions are explicit and short.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from ..clock import Clock
from ..errors import ConfigurationError, DatabaseError, DatabaseTransient, DatabaseUnavailable, SchemaVersionError
from . import redact
from ._sql import NOTIFY_CHANNEL, Row, SqlStore
from .base import Claimed, NewRun, Outcome, PollState, Rescued
from .queries import latest_version, load_migrations, load_queries

try:
    import psycopg
    import psycopg_pool
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ConfigurationError(
        "PostgreSQL support needs psycopg 3 and psycopg-pool: pip install 'rota[postgres]'"
    ) from exc

log = logging.getLogger("rota.store")
# Errors that say nothing about the data: worth retrying (deadlock, serialization failure,
# read-only transaction during a failover, lock/statement timeout, admin shutdown).
_TRANSIENT = (
    psycopg.errors.DeadlockDetected,
    psycopg.errors.SerializationFailure,
    psycopg.errors.ReadOnlySqlTransaction,
    psycopg.errors.LockNotAvailable,
    psycopg.errors.QueryCanceled,
)
_NOW = "coalesce(%(now)s::timestamptz, now())"


class _Session:
    __slots__ = ("cur", "deferred_wake", "now", "queries")

    def __init__(self, cur: psycopg.Cursor[Any], queries: dict[str, str], now: datetime | None) -> None:
        self.cur = cur
        self.queries = queries
        self.now = now
        self.deferred_wake = False

    def q(self, name: str, /, **params: Any) -> list[Row]:
        return self.q_text(self.queries[name], **params)

    def q_text(self, sql: str, /, **params: Any) -> list[Row]:
        params["now"] = self.now
        self.cur.execute(sql, params)
        return self.cur.fetchall() if self.cur.description is not None else []


class PostgresStore(SqlStore):
    dialect = "postgresql"

    def __init__(
        self,
        url: str,
        clock: Clock | None = None,
        *,
        pool_size: int = 10,
        connect_timeout: float = 5.0,
    ) -> None:
        super().__init__(url, clock)
        if pool_size < 1:
            raise ConfigurationError(f"pool_size must be at least 1, got {pool_size}")
        self.queries = load_queries("postgres", _NOW)
        self.connect_timeout = connect_timeout
        self.pool_size = pool_size
        self._pool: psycopg_pool.ConnectionPool[Any] | None = None
        self._pool_lock = threading.Lock()
        self._wakeups = _WakeupLimiter(self._send_wakeup)

    def _open(self) -> psycopg_pool.ConnectionPool[Any]:
        pool = self._pool
        if pool is not None:
            return pool
        with self._pool_lock:
            if self._pool is not None:
                return self._pool
            pool = psycopg_pool.ConnectionPool(
                self.url,
                min_size=1,
                max_size=self.pool_size,
                kwargs={
                    "autocommit": True,
                    "connect_timeout": max(1, round(self.connect_timeout)),
                    # Notice a vanished server or network within about 20 s, not hours.
                    "keepalives": 1,
                    "keepalives_idle": 10,
                    "keepalives_interval": 3,
                    "keepalives_count": 3,
                },
                configure=_configure,
                open=False,
                name="rota",
                timeout=self.connect_timeout,
            )
            try:
                # One direct attempt first: it fails at once with the real reason (refused,
                # unknown host, bad password) where the pool would retry until its timeout.
                psycopg.connect(self.url, connect_timeout=max(1, round(self.connect_timeout))).close()
                pool.open(wait=True, timeout=self.connect_timeout)
            except psycopg.Error as exc:
                pool.close()
                raise DatabaseUnavailable(
                    f"cannot connect to PostgreSQL at {redact(self.url)}: {_reason(exc)}"
                ) from exc
            self._pool = pool
            return pool

    @contextmanager
    def _session(self, transaction: bool) -> Iterator[_Session]:
        pool = self._open()
        now = self.clock.now() if self.clock is not None else None
        try:
            with pool.connection() as conn:
                if transaction:
                    with conn.transaction(), conn.cursor() as cur:
                        session = _Session(cur, self.queries, now)
                        yield session
                    if session.deferred_wake:
                        self._wakeups.after_commit()
                else:
                    with conn.cursor() as cur:
                        yield _Session(cur, self.queries, now)
        except _TRANSIENT as exc:
            raise DatabaseTransient(f"PostgreSQL at {redact(self.url)}: {_reason(exc)}") from exc
        except psycopg.OperationalError as exc:
            raise DatabaseUnavailable(f"PostgreSQL at {redact(self.url)}: {_reason(exc)}") from exc
        except psycopg.Error as exc:
            raise DatabaseError(f"PostgreSQL at {redact(self.url)}: {_reason(exc)}") from exc

    def _tx(self) -> Any:
        return self._session(True)

    def _read(self) -> Any:
        return self._session(False)

    def close(self) -> None:
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def recover(self) -> None:
        """After an outage: drop broken connections from the pool."""
        pool = self._pool
        if pool is not None:
            pool.check()

    # -- value conversions ---------------------------------------------------------------
    def _ts(self, value: datetime | None) -> Any:
        return value

    def _dt(self, value: Any) -> datetime | None:
        if value is None:
            return None
        moment: datetime = value
        if moment.tzinfo is None:  # pragma: no cover - TimeZone is set to UTC per connection
            return moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC) if moment.utcoffset() else moment

    def _names(self, values: Sequence[str] | None) -> Any:
        return list(values) if values is not None else None

    def _p(self, name: str) -> str:
        return f"%({name})s"

    def _notify(self, s: Any, payload: str) -> None:
        if payload == "run" and not self._wakeups.now_or_later():
            s.deferred_wake = True  # a trailing NOTIFY follows after commit
            return
        s.q("notify", channel=NOTIFY_CHANNEL, payload=payload)

    def _send_wakeup(self) -> None:
        with contextlib.suppress(DatabaseError), self._read() as s:
            s.q("notify", channel=NOTIFY_CHANNEL, payload="run")

    # -- migrations ----------------------------------------------------------------------
    def schema_version(self) -> tuple[int, int]:
        latest = latest_version(load_migrations("postgres"))
        with self._read() as s:
            if not s.q_text("SELECT to_regclass('rota_migrations')")[0][0]:
                return 0, latest
            return int(s.q_text("SELECT coalesce(max(version), 0) FROM rota_migrations")[0][0]), latest

    def migrate(self, *, dry_run: bool = False) -> list[str]:
        migrations = load_migrations("postgres")
        with self._tx() as s:
            s.q_text("SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.rota_migrate'))")
            s.q_text(
                "CREATE TABLE IF NOT EXISTS rota_migrations (version integer PRIMARY KEY, "
                "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            current = int(s.q_text("SELECT coalesce(max(version), 0) FROM rota_migrations")[0][0])
            if current > latest_version(migrations):
                raise SchemaVersionError(
                    f"the database at {redact(self.url)} has rota schema version {current}, newer "
                    f"than the {latest_version(migrations)} this version of rota knows: upgrade rota on this "
                    "host (never run older code against a migrated database)"
                )
            applied = []
            for m in [m for m in migrations if m.version > current]:
                applied.append(f"{m.version:04d}_{m.name}")
                if not dry_run:
                    s.cur.execute(m.sql.encode())
                    s.q_text(
                        "INSERT INTO rota_migrations (version, name) VALUES (%(v)s, %(n)s)",
                        v=m.version,
                        n=m.name,
                    )
            return applied

    # -- enqueue -------------------------------------------------------------------------
    def _insert_plain(self, s: Any, runs: Sequence[NewRun]) -> list[int]:
        ids = [int(r[0]) for r in s.q("next_run_ids", n=len(runs))]
        now = s.q("now")[0][0]
        with s.cur.copy(self.queries["insert_runs_bulk"]) as copy:  # COPY: twice the rows/s of INSERT
            for run_id, r in zip(ids, runs, strict=True):
                when = r.scheduled_for if r.scheduled_for is not None else now + timedelta(seconds=r.delay)
                copy.write_row((run_id, r.task, r.queue, r.priority, r.args, r.kwargs, when, when,
                                r.max_attempts, r.timeout, r.backoff))  # fmt: skip
        return ids

    # -- the worker's hot path -----------------------------------------------------------
    def claim(self, owner: str, limit: int, queues: Sequence[str] | None, lease: float) -> list[Claimed]:
        with self._read() as s:
            if queues is None:
                rows = s.q("claim", owner=owner, limit=limit, lease=lease)
            else:
                rows = s.q("claim_in_queues", owner=owner, limit=limit, lease=lease, queues=list(queues))
        rows.sort(key=lambda r: r[0])
        return [Claimed(*r) for r in rows]

    def heartbeat(self, held: Sequence[tuple[int, int]], lease: float) -> tuple[set[int], set[int]]:
        if not held:
            return set(), set()
        with self._read() as s:
            rows = s.q("heartbeat", rows=_json(held), lease=lease)
        return {r[0] for r in rows}, {r[0] for r in rows if r[1]}

    def finish(self, outcomes: Sequence[Outcome]) -> set[int]:
        """Batches travel as one JSON parameter: encoding a list of tuples in C is far
        cheaper than adapting several Python lists to PostgreSQL arrays."""
        plain = [(o.id, o.token, o.result) for o in outcomes if o.status == "succeeded" and o.history is None]
        other = [
            (o.id, o.token, o.status, o.result, o.error, o.retry_in, o.history)
            for o in outcomes
            if not (o.status == "succeeded" and o.history is None)
        ]
        done: set[int] = set()
        with self._read() as s:
            if plain:
                done.update(r[0] for r in s.q("finish_succeeded", rows=_json(plain)))
            if other:
                done.update(r[0] for r in s.q("finish", rows=_json(other)))
        return done

    def hand_back(self, held: Sequence[tuple[int, int]], reason: str) -> set[int]:
        if not held:
            return set()
        with self._tx() as s:
            rows = s.q("hand_back", rows=_json(held), reason=reason)
            self._notify(s, "run")
        return {r[0] for r in rows}

    def rescue(self, limit: int = 100) -> list[Rescued]:
        with self._read() as s:
            if not s.q("any_expired"):  # the usual answer, without an UPDATE
                return []
            rows = s.q("rescue", limit=limit)
        return [Rescued(r[0], r[1], r[2], r[3], _message(r[4])) for r in rows]

    def poll_state(self, queues: Sequence[str] | None) -> PollState:
        with self._read() as s:
            if queues is None:
                row = s.q("poll_state")[0]
            else:
                row = s.q("poll_state_in_queues", queues=list(queues))[0]
        now = self._dt(row[0])
        assert now is not None
        return PollState(now, self._dt(row[1]), self._dt(row[2]))

    def stats(self) -> dict[str, Any]:
        return {"runs": self.count_by_status(), "database": redact(self.url)}

    # -- wake-ups ------------------------------------------------------------------------
    async def listen(self, on_payload: Callable[[str], None]) -> None:
        """LISTEN on the rota channel until cancelled, reconnecting with backoff."""
        delay = 0.5
        while True:
            try:
                aconn = await psycopg.AsyncConnection.connect(
                    self.url, autocommit=True, connect_timeout=max(1, int(self.connect_timeout))
                )
            except psycopg.Error:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
                continue
            try:
                async with aconn:
                    await aconn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    delay = 0.5
                    on_payload("listening")
                    async for note in aconn.notifies():
                        on_payload(note.payload)
            except psycopg.Error as exc:
                log.debug("LISTEN connection lost: %s", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)


_json = json.JSONEncoder(separators=(",", ":")).encode


class _WakeupLimiter:
    """NOTIFY for new runs at most once per `window` from this process, never dropping the
    last: an enqueue inside the window skips its NOTIFY and, after its commit, arms one
    trailing NOTIFY at the window's end (so a worker that claimed before that commit still
    hears of it). Bursts of single enqueues cost a handful of notifications, not thousands."""

    def __init__(self, send: Callable[[], None], window: float = 0.005) -> None:
        self.send = send
        self.window = window
        self._last = -1.0
        self._armed = False
        self._lock = threading.Lock()

    def now_or_later(self) -> bool:
        """True: notify in this transaction. False: the caller defers to after_commit()."""
        now = time.monotonic()
        with self._lock:
            if now - self._last >= self.window and not self._armed:
                self._last = now
                return True
            return False

    def after_commit(self) -> None:
        with self._lock:
            if self._armed:
                return
            self._armed = True
            delay = max(0.0, self._last + self.window - time.monotonic())
        timer = threading.Timer(delay, self._fire)
        timer.daemon = True
        timer.start()

    def _fire(self) -> None:
        with self._lock:
            self._armed = False
            self._last = time.monotonic()
        self.send()


def _configure(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SET TIME ZONE 'UTC'")


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _message(error_json: str) -> str:
    return str(json.loads(error_json)["message"])


__all__ = ["PostgresStore", "redact"]
