"""The PostgreSQL store: the engine when workers span hosts.

Claims are one statement (a CTE selecting due runs `FOR UPDATE SKIP LOCKED`, so concurrent
claimers never wait on each other nor take the same run, and the LIMIT bounds the rows
updated); batch writes pass arrays and `unnest` them; a new run due soon sends `NOTIFY rota`
in its transaction so idle workers wake at commit. "Now" is `now()` on the server (one clock
for every host) unless a clock is configured. Pooled autocommit connections, short explicit
transactions. Limits and rates (the flow claim): see sqlstore/limits.py.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from ... import quarantine
from ...clock import Clock
from ...config import redact_url as redact
from ...errors import (
    ConfigurationError,
    DatabaseError,
    DatabaseRefused,
    DatabaseTransient,
    DatabaseUnavailable,
)
from ...models import FINAL_STATUSES, PENDING, RUNNING, SUCCEEDED
from ..base import Claimed, DueSchedule, Materialization, NewRun, Outcome, Rescued, RunCounts, run_stats
from ..forks import fork_safe, track
from ..records import PARKED, rescued_rows
from ..sqlstore.checkpoints import finish_steps
from ..sqlstore.queries import load_queries
from ..sqlstore.store import NOTIFY_CHANNEL, Row, SqlStore
from .at_exit import closed_at_exit
from .claim_from import ClaimFrom
from .failover import check_interval, read_only
from .flow import PostgresFlow
from .foreign import PgForeignSessions
from .handler_tx import PostgresHandlerConnections, postgres_handler_tx
from .listen import CHECK_EVERY
from .lists import runs_where, status_terms, web_rows
from .migrate import PgMigrations
from .session import (
    CLAIM_PLAN,
    _connect_kwargs,
    _is_retry_at_once,
    _json,
    _reason,
    _Session,
    _session_settings,
    _TimeLoader,
    _TimeOutOfRange,
    _translate,
    _WakeupLimiter,
    begun,
    check_conninfo,
    check_pooler,
    claim_call,
    claimed,
    finish_batches,
    finished_schedules_lock,
    local_settings,
    pipelined,
    refused,
    settle_refused,
    tick_bounds,
)
from .vacuum import PgVacuum
from .wake import listen_where_possible

try:
    import psycopg
    import psycopg.rows
    import psycopg_pool
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ConfigurationError(
        "PostgreSQL support needs psycopg 3 and psycopg-pool: pip install 'rota[postgres]'"
    ) from exc

log = logging.getLogger("rota.store")
T = TypeVar("T")
_ATTEMPTS = 4  # a statement that deadlocks this often in a row is reported (transient)
_NOW = "coalesce(%(now)s::timestamptz, now())"
# Below this many rows (the planner's estimate) run counts are exact; above, final statuses
# are estimated from statistics, so `rota status` and /metrics never scan a big table.
EXACT_COUNT_LIMIT = 100_000


class PostgresStore(PgMigrations, PostgresFlow, PgForeignSessions, PgVacuum, SqlStore):
    dialect = "postgresql"

    def __init__(
        self,
        url: str,
        clock: Clock | None = None,
        *,
        pool_size: int = 10,
        connect_timeout: float = 5.0,
        lock_timeout: float | None = 5.0,
        statement_timeout: float | None = None,
        idle_in_transaction_timeout: float | None = 60.0,
        tick_lock_timeout: float = 0.5,
        tick_idle_timeout: float = 1.0,
        listen_check_interval: float = CHECK_EVERY,
        pooler: str | None = None,
        listen_url: str | None = None,
    ) -> None:
        super().__init__(url, clock)
        check_conninfo(url)
        if pool_size < 1:
            raise ConfigurationError(f"pool_size must be at least 1, got {pool_size}")
        self._settings = _session_settings(
            lock_timeout=lock_timeout,
            statement_timeout=statement_timeout,
            idle_in_transaction_session_timeout=idle_in_transaction_timeout,
        )
        self._tick_bounds = tick_bounds(tick_lock_timeout, tick_idle_timeout)
        self.listen_check_interval = check_interval(listen_check_interval)
        # Behind a transaction pooler: no session state (see POOLERS in session.py).
        self.pooled = check_pooler(pooler)
        self._local = local_settings(self._settings) if self.pooled else None
        self._begin = "BEGIN" if self._local is None else f"BEGIN; {self._local}"
        if listen_url is not None:
            check_conninfo(listen_url)
        self.listen_url = listen_url
        self.queries = load_queries("postgres", _NOW)
        self.connect_timeout = connect_timeout
        self.pool_size = pool_size
        self.exact_count_limit = EXACT_COUNT_LIMIT
        self._pool: psycopg_pool.ConnectionPool[Any] | None = None
        self._pool_lock = threading.Lock()
        self._cuts = 0  # connections cut while in use (a read retries once after one)
        self._wakeups = _WakeupLimiter(self._send_wakeup)
        self._own_identity: Row | None = None
        self._handler_conns = PostgresHandlerConnections(self)  # rota.transactional
        self.claim_from = ClaimFrom()  # where a busy worker's next claim starts
        fork_safe(self)

    def after_fork(self) -> None:
        """In a forked child (rota.stores.forks): the pool and its threads are the parent's."""
        self._pool, self._pool_lock = None, threading.Lock()
        self._handler_conns.after_fork()

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
                kwargs=_connect_kwargs(self.url, self.connect_timeout, self.pooled),
                configure=self._configure,
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
                kind = DatabaseRefused if refused(exc) else DatabaseUnavailable
                raise kind(f"cannot connect to PostgreSQL at {redact(self.url)}: {_reason(exc)}") from exc
            self._pool = closed_at_exit(pool)  # before the exit's last collection (at_exit.py)
            return pool

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        track(conn)
        conn.execute("SET TIME ZONE 'UTC'")
        conn.adapters.register_loader("timestamptz", _TimeLoader)
        if self.pooled:  # the timeouts are set in each transaction; TimeZone PgBouncer keeps
            return
        for name, value in self._settings.items():
            conn.execute(f"SET {name} = {value}")

    @contextmanager
    def _session(self, transaction: bool, pipeline: bool = False, local: bool = True) -> Iterator[_Session]:
        """A session on a pooled connection. `transaction`: one transaction, committed at
        the block's end. `pipeline`: one transaction whose statements, queued with `send`,
        travel with BEGIN and COMMIT in one round trip (rows in `received`; no NOTIFY);
        `local` False: without the timeouts a transaction pooler needs set in it (a
        transaction of one statement, as the statement alone would be)."""
        pool = self._open()
        now = self.clock.now() if self.clock is not None else None
        used: psycopg.Connection[Any] | None = None
        try:
            with pool.connection() as conn:
                used = conn
                if pipeline:
                    with pipelined(conn, self._local if local else None) as cur:
                        session = _Session(cur, self.queries, now)
                        yield session
                    session.receive()
                elif transaction:
                    with begun(conn, self._begin) if self.pooled else conn.transaction(), conn.cursor() as cur:
                        session = _Session(cur, self.queries, now)
                        yield session
                    if session.deferred_wake:
                        self._wakeups.after_commit()
                else:
                    with conn.cursor() as cur:
                        yield _Session(cur, self.queries, now)
        except psycopg.Error as exc:
            if used is None or used.broken or read_only(exc):  # read-only: see failover.py
                self._drop_pool(pool)
                self._cuts += used is not None  # a connection that worked was cut (see _select)
            raise _translate(exc, self.url) from exc

    def _select(self, query: str, suffix: str = "", /, **params: Any) -> list[Row]:
        """A client read (runs, schedules), once more on a new connection when the one it
        used was cut (failover, restart): reads are idempotent. Not when the database is away."""
        cuts = self._cuts
        try:
            return super()._select(query, suffix, **params)
        except DatabaseTransient:
            if self._cuts == cuts:
                raise
            log.info("a connection was cut during a read; reading again on a new one")
            return super()._select(query, suffix, **params)

    def _drop_pool(self, pool: psycopg_pool.ConnectionPool[Any]) -> None:
        """A connection broke (failover, terminated backends, network): its idle siblings
        most likely broke with it. Replace the whole pool at once instead of finding the dead
        connections one failed call at a time."""
        with self._pool_lock:
            if self._pool is not pool:
                return
            self._pool = None
        threading.Thread(target=pool.close, kwargs={"timeout": 1.0}, daemon=True).start()
        self._handler_conns.drop_idle()  # transactional handlers' connections: the same server

    def _tx(self) -> Any:
        return self._session(True)

    def _read(self) -> Any:
        return self._session(False)

    def close(self) -> None:
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        self._handler_conns.close()

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
        if isinstance(value, _TimeOutOfRange):
            raise ValueError(f"time {value!r} is out of range (after year 9999)")
        moment: datetime = value
        if moment.tzinfo is None:  # pragma: no cover - TimeZone is set to UTC per connection
            return moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC) if moment.utcoffset() else moment

    def _names(self, values: Sequence[str] | None) -> Any:
        return list(values) if values is not None else None

    _runs_where = runs_where  # listings by task or schedule: see lists.py
    _status_terms = status_terms  # the status as a literal: see lists.py
    web_rows = web_rows  # the dashboard's charts, pipelined

    def _p(self, name: str) -> str:
        return f"%({name})s"

    def _notify(self, s: Any, payload: str) -> None:
        if payload.startswith("run") and not self._wakeups.now_or_later():
            s.deferred_wake = True  # a trailing NOTIFY ("run": look now) follows after commit
            return
        s.q("notify", channel=NOTIFY_CHANNEL, payload=payload)

    def _notify_run(self, s: Any, at: datetime | None, delay: float | None = None) -> None:
        if delay is None or self._due_now(at, delay):
            super()._notify_run(s, at, delay)  # due now, or at a known time
        elif not self._wakeups.now_or_later():
            s.deferred_wake = True
        else:  # due after a delay: now + delay on the database's clock, not this host's
            s.q("notify_due", channel=NOTIFY_CHANNEL, at=self._ts(at), delay=delay)

    def _send_wakeup(self) -> None:
        with contextlib.suppress(DatabaseError), self._read() as s:
            s.q("notify", channel=NOTIFY_CHANNEL, payload="run")

    # -- enqueue -------------------------------------------------------------------------
    def _insert_plain(self, s: Any, runs: Sequence[NewRun]) -> list[int]:
        ids = [int(r[0]) for r in s.q("next_run_ids", n=len(runs))]
        now = s.q("now")[0][0]
        gated = any(r.limit_name is not None or r.rate_name is not None for r in runs)
        query = self.queries["insert_runs_bulk_gated" if gated else "insert_runs_bulk"]
        with s.cur.copy(query) as copy:  # COPY: twice the rows/s of INSERT (ten times a gated INSERT's)
            for run_id, r in zip(ids, runs, strict=True):
                when = r.scheduled_for if r.scheduled_for is not None else now + timedelta(seconds=r.delay)
                row = (run_id, r.task, r.queue, r.priority, r.args, r.kwargs, when, when,
                       r.max_attempts, r.timeout, r.backoff)  # fmt: skip
                copy.write_row((*row, r.limit_name, r.limit_key, r.rate_name, r.rate_key) if gated else row)
        return ids

    def insert_runs(self, runs: Sequence[NewRun], *, notify: bool = True) -> list[tuple[int, bool]]:
        """Again at once after a deadlock (a dependent's parents locked in id order while a
        finisher locks some of them in another order): PostgreSQL rolled it all back."""
        self.claim_from.enqueued(runs)
        return self._again(functools.partial(super().insert_runs, notify=notify), runs)

    def insert_runs_in(self, s: Any, runs: Sequence[NewRun]) -> list[tuple[int, bool]]:
        self.claim_from.enqueued(runs)
        return super().insert_runs_in(s, runs)

    # Plain runs may be COPYed in a caller's transaction: their ids come from the sequence.
    bulk_in_foreign_tx = True

    def handler_transaction(self) -> Any:
        return postgres_handler_tx(self, self._handler_conns)

    # -- the worker's hot path -----------------------------------------------------------
    def _plain_claim(
        self, owner: str, limit: int, queues: Sequence[str] | None, lease: float, start: int | None = None
    ) -> list[Claimed]:
        query, params = claim_call(owner, limit, queues, lease, start, self.claim_from.params(queues))
        with self._session(False, pipeline=True, local=False) as s:  # BEGIN, claim_plan, the claim, COMMIT: one trip
            s.send(CLAIM_PLAN[0])
            s.send(query, **params)
        rows = s.received[1]
        self.claim_from.claimed(queues, rows)
        return claimed(rows)

    def claim_ahead(
        self, owner: str, limit: int, queues: Sequence[str] | None, lease: float, ahead: float
    ) -> list[Claimed]:
        params: dict[str, Any] = {"owner": owner, "limit": limit, "lease": lease, "ahead": ahead}
        query = "claim_ahead" if queues is None else "claim_ahead_in_queues"
        if queues is not None:
            params["queues"] = list(queues)
        with self._read() as s:
            return claimed(s.q(query, **params))

    def start(self, held: Sequence[tuple[int, int, float]]) -> set[int]:
        if not held:
            return set()
        with self._read() as s:
            return {r[0] for r in s.q("start", rows=_json(sorted(held)))}

    def heartbeat(self, held: Sequence[tuple[int, int]], lease: float) -> tuple[set[int], set[int]]:
        if not held:
            return set(), set()
        with self._read() as s:
            rows = s.q("heartbeat", rows=_json(held), lease=lease)
        return {r[0] for r in rows}, {r[0] for r in rows if r[1]}

    def finish(self, outcomes: Sequence[Outcome]) -> set[int]:
        """Batches travel as one JSON parameter: encoding a list of tuples in C is far
        cheaper than adapting several Python lists to PostgreSQL arrays. Each statement
        first locks the schedules of its runs in name order (the rota_run_finished trigger
        updates them), so concurrent finishers never lock them in opposite orders; a
        deadlock that happens anyway is retried at once."""
        done = self.park_runs([o for o in outcomes if o.status == PARKED])
        outcomes = [o for o in outcomes if o.status != PARKED]
        for query, params in finish_steps(outcomes):  # the handlers' last checkpoints, committed first
            self._again(self._write_rows, query, params)
        batches = finish_batches(outcomes)
        written = [self._again(self._write_rows, query, params) for query, params in batches]
        settle_refused(outcomes, batches, written)
        for rows in written:
            done.update(r[0] for r in rows)
        return done

    def _plain_finish_and_claim(self, outcomes: Sequence[Outcome], *claim: Any) -> tuple[set[int], list[Claimed]]:
        """The statements of `finish` and `claim` in one transaction, sent in pipeline mode
        (one round trip, one commit); a deadlock rolls back both and is retried at once."""
        return self._again(self._finish_and_claim, outcomes, *claim)

    def _finish_and_claim(self, outcomes: Sequence[Outcome], *claim: Any) -> tuple[set[int], list[Claimed]]:
        batches = finish_batches(outcomes)
        # two statements in one transaction: their schedules locked in one order first; then
        # the handlers' last checkpoints (rota.durable), before their outcomes
        lock = [*([finished_schedules_lock(outcomes)] if len(batches) > 1 else []), *finish_steps(outcomes)]
        owner, limit, queues, lease, start = claim
        claim_ = claim_call(owner, limit, queues, lease, start, self.claim_from.params(queues))
        calls = [*lock, *batches, CLAIM_PLAN, claim_]
        with self._session(False, pipeline=True) as s:
            for query, params in calls:
                s.send(query, **params)
        *written, _, claims = s.received[len(lock) :]
        self.claim_from.claimed(queues, claims)
        settle_refused(outcomes, batches, written)
        return {r[0] for rows in written for r in rows}, claimed(claims)

    def _write_rows(self, query: str, params: dict[str, Any]) -> list[Any]:
        with self._read() as s:
            rows: list[Any] = s.q(query, **params)
        return rows

    def _again(self, op: Callable[..., T], /, *args: Any) -> T:
        """Run one statement or transaction, again at once after a deadlock or a
        serialization failure (PostgreSQL rolled it back whole: nothing was written)."""
        for attempt in range(_ATTEMPTS):
            try:
                return op(*args)
            except DatabaseTransient as exc:
                if attempt == _ATTEMPTS - 1 or not _is_retry_at_once(exc):
                    raise
                log.info("retrying at once: %s", exc)
        raise AssertionError("unreachable")  # pragma: no cover

    def materialize(self, due: DueSchedule, plan: Materialization) -> bool:
        return self._again(super().materialize, due, plan)

    def _bound_tick_locks(self, s: Any) -> None:
        s.q_text(self._tick_bounds)  # waiting for and holding a tick's rows: see tick_bounds

    def hand_back(self, held: Sequence[tuple[int, int]], reason: str) -> set[int]:
        if not held:
            return set()
        return self._again(self._hand_back, sorted(held), reason)

    def _hand_back(self, held: Sequence[tuple[int, int]], reason: str) -> set[int]:
        self.claim_from.front()  # (pending again where they were: perhaps before the last claim)
        with self._tx() as s:
            rows = s.q("hand_back", rows=_json(held), reason=reason)
            self._notify(s, "run")
        return {r[0] for r in rows}

    def rescue(self, limit: int = 100) -> list[Rescued]:
        return self._again(self._rescue, limit)

    def _rescue(self, limit: int) -> list[Rescued]:
        with self._read() as s:
            if not s.q("any_expired"):  # the usual answer, without an UPDATE
                return []
            damaged = s.q("lease_damaged", limit=limit)
            rows = s.q("rescue", limit=limit)
        if rows:
            self.claim_from.front()  # (pending again where they were)
        return rescued_rows(damaged, True) + rescued_rows(rows)

    def stats(self) -> dict[str, Any]:
        return {**run_stats(self.run_counts()), "database": redact(self.url)}

    def move_history(self, limit: int) -> int:
        with self._tx() as s:
            rows = s.q("move_history", limit=limit)
        for run_id, _ in (r for r in rows if r[1]):  # damaged: its id is in the history already
            quarantine.report(quarantine.RUN, run_id, "a succeeded run whose id rota_history holds too: left unmoved")
        return sum(not r[1] for r in rows)

    def run_counts(self) -> RunCounts:
        """Exact on a table the planner thinks smaller than `exact_count_limit` rows (or has
        not analyzed yet); else pending and running counted exactly through rota_runs_active
        (they are the few active runs) and the final statuses estimated from statistics."""
        with self._read() as s:
            rows = s.q("run_counts")
            kept = round(float(s.q("history_estimate")[0][0] or 0))  # succeeded, schema 17
            total = int(rows[0][1]) + kept if rows and rows[0][1] is not None else -1
            estimates = {str(status): int(n) for status, n in rows[1:]}
            estimates[SUCCEEDED] = estimates.get(SUCCEEDED, 0) + kept
            if total < self.exact_count_limit or not rows[1:]:
                return RunCounts({status: int(n) for status, n in s.q("count_by_status")}, frozenset())
            counts = {status: estimates.get(status, 0) for status in FINAL_STATUSES}
            for status in (PENDING, RUNNING):
                counts[status] = int(s.q("count_status", status=status)[0][0])
        return RunCounts(counts, frozenset(FINAL_STATUSES))

    # -- wake-ups ------------------------------------------------------------------------
    async def listen(self, on_payload: Callable[[str], None]) -> None:
        """LISTEN on the channel of the app's schema until cancelled (see listen.py)."""
        await listen_where_possible(self, on_payload)  # or return: see wake.py


__all__ = ["PostgresStore", "redact"]
