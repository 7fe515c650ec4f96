"""The MySQL and MariaDB store: the engine for teams whose database is MySQL 8.0+ or MariaDB 10.6+.

Where the engine forces a design of its own (docs/deploy.md says what each costs):

- claims: `SELECT ... FOR UPDATE SKIP LOCKED` of the due runs' ids, then one UPDATE of those
  ids and a read of them, in one transaction (no `UPDATE ... RETURNING`); fencing tokens come
  from a counter row bumped by one statement committed on its own on the store's token
  connection once the claim's runs are locked (claims take turns on the counter for that
  statement, not for the length of their transaction; a claim rolled back leaves a gap);
- the exclusive-schedule rule without partial indexes: a generated column that is the
  schedule's name while its run is active and not held (NULL otherwise) with a unique index;
- PostgreSQL's partial indexes for limits, rates, schedules, misfires, finished and pending
  runs: indexes on virtual columns NULL outside the index's predicate (migration 0024), named
  by the queries that read them (MariaDB matches such an index only by the column's name);
- what PostgreSQL's triggers do to rota_runs itself (a MySQL trigger may not update the table
  that fired it): the exclusive slot's hand-over and the release or cancellation of
  dependents, done by the statements that end runs (`settle`);
- no NOTIFY: this process's workers are told at commit; other processes' idle workers look
  at a quick probe (`change_probe`: the newest run id and the token counter, two primary-key
  reads) every 10-20 ms and claim at once when a new run appeared, and at the whole probe
  (`data_version`: those, the cancellation requests and the runs due) every 100 ms;
- a deadlock (1213) or a lock wait timeout (1205) rolls back the whole transaction: it is run
  again at once, up to four times.

Sessions run READ COMMITTED in UTC with a strict sql_mode (see session.py). "Now" is the
server's UTC_TIMESTAMP(6) unless a clock is configured.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from ...clock import Clock
from ...config import redact_url as redact
from ...errors import ConfigurationError, DatabaseError, DatabaseTransient, DatabaseUnavailable
from ..base import Claimed, NewRun, Rescued, ScheduleDef, run_stats
from ..forks import fork_safe
from ..records import claimed_rows, rescued_rows
from ..sqlstore.base import _Abort
from ..sqlstore.queries import load_queries
from ..sqlstore.stepwise_flow import StepwiseFlow  # the flow claim step by step, as SQLite's
from ..sqlstore.store import NOTIFY_CHANNEL, SqlStore
from .hot_path import MySQLHotPath, settle
from .migrate import MySQLMigrations
from .session import (
    IDLE_IN_TRANSACTION,
    LOCK_WAIT,
    TICK_IDLE,
    TICK_LOCK_WAIT,
    DriverError,
    Pool,
    Session,
    abandon,
    close_quietly,
    connect_kwargs,
    is_retry_at_once,
    translate,
)

log = logging.getLogger("rota.store")
T = TypeVar("T")
_ATTEMPTS = 4
_BULK = 500  # runs per multi-row INSERT
NOW = "CAST(COALESCE(%(now)s, UTC_TIMESTAMP(6)) AS DATETIME(6))"
# s between a tick pass's tries at its schedule's row while another transaction holds it
# (take_tick): at most about 0.13 s in all, then the pass is locked out as before (a host frozen
# mid-tick; PostgreSQL waits up to tick_lock_timeout, 0.5 s, for such a row).
TICK_RETRIES = (0.002, 0.004, 0.008, 0.016, 0.032, 0.064)
TOKEN_WAIT = 1  # s: the token connection's lock wait, then the claim's own transaction takes them


class MySQLStore(MySQLHotPath, MySQLMigrations, StepwiseFlow, SqlStore):
    dialect = "mysql"
    # A claim is five round trips and a durable commit (PostgreSQL's: one statement): 9 ms
    # median on a loaded 2-core machine, 24-200 ms in its tail, which made a tick claimed
    # 20 ms ahead start that much late (bench/results/mysql-pickup-2026-12-07.md).
    claim_lead = 0.1

    def __init__(
        self,
        url: str,
        clock: Clock | None = None,
        *,
        pool_size: int = 10,
        connect_timeout: float = 5.0,
        lock_wait_timeout: int = 5,
        pooler: str | None = None,
        listen_url: str | None = None,
    ) -> None:
        super().__init__(url, clock)
        if pooler is not None or listen_url is not None:
            raise ConfigurationError(
                f"pooler={pooler!r} and listen_url={listen_url!r} are PostgreSQL settings (ROTA_POOLER, "
                "ROTA_LISTEN_URL): unset them for a MySQL/MariaDB database"
            )
        if pool_size < 1:
            raise ConfigurationError(f"pool_size must be at least 1, got {pool_size}")
        if not 1 <= lock_wait_timeout <= 3600:
            raise ConfigurationError(
                f"lock_wait_timeout must be whole seconds from 1 to 3600, got {lock_wait_timeout!r}"
            )
        self._kwargs = connect_kwargs(url, connect_timeout, lock_wait_timeout)
        self.lock_wait_timeout = lock_wait_timeout
        self.queries = load_queries("mysql", NOW)
        self.pool_size = pool_size
        self.connect_timeout = connect_timeout
        self._pool: Pool | None = None
        self._pool_lock = threading.Lock()
        self.listeners: list[Callable[[str], None]] = []  # this process's workers (told at commit)
        self.server: str | None = None  # "MariaDB 10.11", after the version check
        self._own_identity: tuple[Any, ...] | None = None
        self._token_conn: Any = None  # autocommit: the claims' tokens (_take_tokens)
        self._token_lock = threading.Lock()
        fork_safe(self)

    # -- connections ---------------------------------------------------------------------
    def _open(self) -> Pool:
        pool = self._pool
        if pool is not None:
            return pool
        with self._pool_lock:
            if self._pool is None:
                self._pool = Pool(self.url, self._kwargs, self.pool_size, self.connect_timeout)
                self._check_server(self._pool)
            return self._pool

    @contextmanager
    def _session(self, transaction: bool) -> Iterator[Session]:
        pool = self._open()
        now = self._ts(self.clock.now()) if self.clock is not None else None
        try:
            with pool.connection() as conn:
                if transaction:
                    conn.begin()
                    session = Session(conn, self.queries, now, True, settle)
                    try:
                        yield session
                        conn.commit()
                    except BaseException:
                        with contextlib.suppress(DriverError):  # a cut connection: its own error says why
                            conn.rollback()
                        raise
                    finally:
                        for statement in session.after:
                            session.cur.execute(statement)
                else:
                    session = Session(conn, self.queries, now, False, settle)
                    yield session
        except DriverError as exc:
            raise translate(exc, self.url, self.max_packet) from exc
        for payload in session.wake:
            for callback in list(self.listeners):
                callback(payload)

    def _tx(self) -> Any:
        return self._session(True)

    def _bound_tick_locks(self, s: Any) -> None:
        """A tick's transaction waits at most TICK_LOCK_WAIT s for a row another host holds
        and, on MariaDB, is ended after TICK_IDLE s idle (a host frozen mid-tick: the other
        hosts make that tick and the later ones about a second late); put back after it."""
        lock_wait = self.lock_wait_timeout
        if self.server is not None and self.server.startswith("MariaDB"):
            s.q_text(f"SET SESSION idle_transaction_timeout = {TICK_IDLE}, innodb_lock_wait_timeout = {TICK_LOCK_WAIT}")
            s.after.append(
                f"SET SESSION idle_transaction_timeout = {IDLE_IN_TRANSACTION}, innodb_lock_wait_timeout = {lock_wait}"
            )
        else:
            s.q_text(f"SET SESSION innodb_lock_wait_timeout = {TICK_LOCK_WAIT}")
            s.after.append(f"SET SESSION innodb_lock_wait_timeout = {lock_wait}")

    def _take_tick(self, s: Any, due: Any) -> None:
        """The schedule's row as the ticker read it, locked without waiting (take_tick): the
        instance that loses a tick neither waits for the winner's commit nor locks its run.
        A row still as read but locked while one of the schedule's runs is active (tick_held:
        that run's finish may hold it) is tried again a few times (TICK_RETRIES), locking
        nothing meanwhile: a finish commits within milliseconds and the tick is made then,
        not at the next poll. Another tick maker's commit moves the row on and ends the pass.
        With no active run the holder is another tick maker, or a finish that has just
        committed: tried once more, then the pass moves on (two workers share a pass)."""
        old, spare = self._ts(due.next_run_at), 1
        for pause in TICK_RETRIES:
            if s.q("take_tick", name=due.name, old=old):
                return
            held = s.q("tick_held", name=due.name, old=old)
            if not held or not (held[0][0] or spare):
                raise _Abort
            spare -= not held[0][0]
            time.sleep(pause)
        if not s.q("take_tick", name=due.name, old=old):
            raise _Abort

    def _read(self) -> Any:
        return self._session(False)

    def close(self) -> None:
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        self._drop_token_conn()

    def recover(self) -> None:
        """After an outage: drop the idle connections (they most likely broke with it)."""
        if self._pool is not None:
            self._pool.drop_idle()
        self._drop_token_conn()

    def _take_tokens(self, n: int) -> int | None:
        """`n` fencing tokens for a claim whose runs are locked: the last one, from one UPDATE
        of the counter committed at once on a connection of its own (the claim's transaction
        never holds the counter's row lock: two workers' claims do not take turns for their
        whole length). 0 when the counter is damaged (take_tokens leaves it as it is). None
        when the counter stayed locked for 1 s (TOKEN_WAIT): the claim takes them in its own
        transaction. The server cannot see the claim waiting on this connection: a
        transaction holding the counter that waits for the claim's locks (App.retry's key)
        made a cycle it does not detect, each side waiting out the lock wait timeout. A token
        connection cut while idle (wait_timeout, a proxy) is replaced at once, not an outage."""
        with self._token_lock:
            conn, self._token_conn = self._token_conn, None
            if conn is not None:  # idle since the last claim that found runs: maybe cut since
                try:
                    return self._token_update(conn, n)
                except DatabaseUnavailable:
                    pass  # (its tokens, if taken, are a gap) a new connection, once
            return self._token_update(None, n)

    def _token_update(self, conn: Any, n: int) -> int | None:
        """take_tokens on `conn` (a new token connection if None), kept for the next claim."""
        try:
            if conn is None:
                conn = self._open().new_connection()
                conn.cursor().execute(f"SET SESSION innodb_lock_wait_timeout = {TOKEN_WAIT}")
            with conn.cursor() as cur:
                cur.execute(self.queries["take_tokens"], {"n": n})
                last = int(cur.lastrowid or 0)
        except DriverError as exc:
            if conn is not None and exc.args and exc.args[0] == LOCK_WAIT:  # the statement only
                self._token_conn = conn
                return None
            if conn is not None:
                close_quietly(conn)
            raise translate(exc, self.url, self.max_packet) from exc
        self._token_conn = conn
        return last

    def after_fork(self) -> None:
        """In a forked child: the token connection is the parent's (session.fork_safe)."""
        self._pool_lock, self._token_lock = threading.Lock(), threading.Lock()
        conn, self._token_conn = self._token_conn, None
        if conn is not None:
            abandon(conn)

    def _drop_token_conn(self) -> None:
        with self._token_lock:
            conn, self._token_conn = self._token_conn, None
        if conn is not None:
            close_quietly(conn)

    def data_version(self) -> tuple[Any, ...]:
        """Changes when a run is enqueued or claimed or a cancellation is requested: the
        other processes' workers look at it instead of hearing a NOTIFY."""
        with self._read() as s:
            return tuple(s.q("data_version")[0])

    def change_probe(self) -> tuple[int, int]:
        """The quick look (an idle worker's, every 10-20 ms): the newest run id and the token
        counter. A new id is a run to claim at once; a claim elsewhere only says what is due
        may have changed. One round trip on a raw cursor (no session: a look's client CPU is
        most of an idle worker's)."""
        try:
            with self._open().connection() as conn, conn.cursor() as cur:
                cur.execute(self.queries["change_probe"])
                newest, token = cur.fetchone()
        except DriverError as exc:
            raise translate(exc, self.url) from exc
        return int(newest), int(token or 0)

    def host_clock(self) -> float:
        return self.now().timestamp()

    # -- value conversions ---------------------------------------------------------------
    def _ts(self, value: datetime | None) -> Any:
        if value is None:
            return None
        return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo is not None else value

    def _dt(self, value: Any) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, (int, float)):
            return datetime.fromtimestamp(value, UTC)
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        moment: datetime = value
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)

    def _names(self, values: Sequence[str] | None) -> Any:
        return json.dumps(list(values)) if values is not None else None

    def _id_list(self, ids: Sequence[int]) -> Any:
        return json.dumps(list(ids))  # read with JSON_TABLE

    def _time_list(self, times: Sequence[datetime]) -> Any:
        return [self._ts(t) for t in times]  # `IN %(ticks)s`: PyMySQL writes the list as (a, b, ...)

    def _p(self, name: str) -> str:
        return f"%({name})s"

    def _notify(self, s: Any, payload: str) -> None:
        s.wake.append(payload)  # told to this process's workers after COMMIT

    # -- retries -------------------------------------------------------------------------
    def _again(self, op: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run a transaction again at once after a deadlock or a lock wait timeout: the
        server rolled it back whole, nothing was written."""
        for attempt in range(_ATTEMPTS):
            try:
                return op(*args, **kwargs)
            except DatabaseTransient as exc:
                if attempt == _ATTEMPTS - 1 or not is_retry_at_once(exc):
                    raise
                log.info("retrying at once: %s", exc)
        raise AssertionError("unreachable")  # pragma: no cover

    def insert_runs(self, runs: Sequence[NewRun], *, notify: bool = True) -> list[tuple[int, bool]]:
        return self._again(functools.partial(super().insert_runs, notify=notify), runs)

    def materialize(self, due: Any, plan: Any) -> bool:
        return self._again(super().materialize, due, plan)

    def cancel(self, run_id: int, reason: str) -> str | None:
        return self._again(super().cancel, run_id, reason)

    # A schedule's admin writes meet the tick makers' transactions on its rows and runs
    # (a removal deadlocked with a tick across processes): run again at once too.
    def update_schedule(self, sdef: ScheduleDef, next_run_at: datetime | None) -> None:
        self._again(super().update_schedule, sdef, next_run_at)

    def remove_schedule(self, name: str) -> int:
        return self._again(super().remove_schedule, name)

    def set_paused(self, name: str, paused: bool, next_run_at: datetime | None) -> None:
        self._again(super().set_paused, name, paused, next_run_at)

    def _flow_finish_and_claim(self, *args: Any) -> tuple[set[int], int, list[Claimed], bool, bool]:
        """The flow claim's one transaction, run again at once after a deadlock as the plain
        claim is (concurrent claimers of one limit's keys deadlocked: the error reached them)."""
        return self._again(super()._flow_finish_and_claim, *args)

    # -- enqueue -------------------------------------------------------------------------
    def _insert_plain(self, s: Any, runs: Sequence[NewRun]) -> list[int]:
        """Multi-row INSERTs of up to 500 runs each: InnoDB gives the rows of one statement
        whose row count it knows consecutive ids, the first in the OK packet (lastrowid)."""
        now = s.now or s.q("now")[0][0]
        gated = any(r.limit_name is not None or r.rate_name is not None for r in runs)
        head, values = self.queries["insert_runs_bulk_gated" if gated else "insert_runs_bulk"].split("VALUES", 1)
        ids: list[int] = []
        for start in range(0, len(runs), _BULK):
            chunk = runs[start : start + _BULK]
            args: list[Any] = []
            for r in chunk:
                when = self._ts(r.scheduled_for if r.scheduled_for is not None else now + timedelta(seconds=r.delay))
                args += [r.task, r.queue, r.priority, r.args, r.kwargs, when, when, r.max_attempts, r.timeout,
                         r.backoff, self._ts(now)]  # fmt: skip
                if gated:
                    args += [r.limit_name, r.limit_key, r.rate_name, r.rate_key]
            s.cur.execute(f"{head} VALUES {','.join([values.strip()] * len(chunk))}", args)
            if s.cur.rowcount != len(chunk):  # pragma: no cover - every row inserts or the statement fails
                raise DatabaseError(f"MySQL inserted {s.cur.rowcount} of {len(chunk)} runs")
            first = int(s.cur.lastrowid)
            ids += range(first, first + len(chunk))
        return ids

    @contextmanager
    def foreign_session(self, conn: Any) -> Iterator[Session]:
        """A session on a caller's PyMySQL connection, in whatever transaction it has open (its
        commit or rollback decides). Refused unless it is on this store's database, migrated.
        Workers notice the commit through their change probe (data_version)."""
        now = self._ts(self.clock.now()) if self.clock is not None else None
        session = Session(conn, self.queries, now, True, settle)
        try:
            database, tables, host = session.q("store_identity")[0]
            own = self._identity()
            if (database, host) != (own[0], own[2]):
                raise ConfigurationError(
                    f"the connection is to the MySQL database {database!r} on {host!r}, not to this app's "
                    f"store {own[0]!r} on {own[2]!r}: enqueue in a transaction of the store's own database"
                )
            if not tables:
                raise ConfigurationError(
                    f"the MySQL database {database!r} has no rota tables yet: call app.migrate() once at "
                    "start-up (outside the transaction)"
                )
            yield session
        except DriverError as exc:
            raise translate(exc, self.url, self.max_packet) from exc
        finally:
            session.cur.close()

    def _identity(self) -> tuple[Any, ...]:
        if self._own_identity is None:
            with self._read() as s:
                self._own_identity = tuple(s.q("store_identity")[0])
        return self._own_identity

    def handler_transaction(self) -> Any:
        from .handler_tx import mysql_handler_tx

        return mysql_handler_tx(self)

    def connect_options(self) -> dict[str, Any]:
        """PyMySQL's arguments for a connection of this store's (a transactional handler's)."""
        return dict(self._kwargs)

    def _settle_hook(self) -> Any:
        return settle

    def stats(self) -> dict[str, Any]:
        return {**run_stats(self.run_counts()), "database": redact(self.url)}

    def _status_terms(self, flt: Any, params: dict[str, Any]) -> list[str]:
        """A listing by schedule and status names sched_status too: rota_runs_schedule_status
        keys it (migration 0024; MySQL matches an index on a virtual column only by name)."""
        terms = super()._status_terms(flt, params)
        if flt.schedule is not None:
            terms.append("sched_status = %(status)s")
        return terms

    def rescue(self, limit: int = 100) -> list[Rescued]:
        with self._read() as s:
            if not s.q("any_expired"):
                return []
        damaged = self._again(self._one, "lease_damaged", limit=limit)
        rows = self._again(self._one, "rescue", limit=limit)
        return rescued_rows(damaged, True) + rescued_rows(rows)

    def _flow_rows(self, s: Any, owner: str, limit: int, names: Any, lease: float, start: int) -> list[Any]:
        """The flow claim, after the token counter's row is locked: claimers take turns from
        here to their commit, so the room one sees is not taken meanwhile by another."""
        s.q("flow_lock")
        return super()._flow_rows(s, owner, limit, names, lease, start)

    def _claimed_rows(self, rows: list[Any]) -> list[Claimed]:
        return claimed_rows(rows, _claim_of)


def _claim_of(r: Any) -> Claimed:
    return Claimed(*r)


__all__ = ["NOTIFY_CHANNEL", "DatabaseError", "MySQLStore"]
