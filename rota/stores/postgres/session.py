"""PostgreSQL connections and sessions: the cursor wrappers, the time loader, connect and
session settings, error translation, and the NOTIFY limiter (used by rota.stores.postgres)."""

from __future__ import annotations

import json
import operator
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from itertools import starmap
from typing import Any

from ... import quarantine
from ...config import redact_text
from ...config import redact_url as redact
from ...errors import (
    ConfigurationError,
    DatabaseError,
    DatabaseTransient,
    DatabaseUnavailable,
    PermissionDenied,
    did_you_mean,
)
from ..base import Claimed, Outcome
from ..records import REFUSE_DELAY, REFUSED, UNKNOWN_TASK_GRACE, claimed_rows, typed_sound
from ..sqlstore.base import Row
from .claim_from import FRONT

try:
    import psycopg
    import psycopg.rows
    from psycopg.abc import AdaptContext
    from psycopg.adapt import Loader
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ConfigurationError(
        "PostgreSQL support needs psycopg 3 and psycopg-pool: pip install 'rota[postgres]'"
    ) from exc


class _TimeOutOfRange(str):
    """A stored time Python cannot hold (after year 9999, written by hand): `_dt` refuses it
    with ValueError, so a run read shows it as corrupt instead of failing the whole query."""


class _TimeLoader(Loader):
    """psycopg's own timestamptz loader (the C one where installed), with a time out of
    Python's range read as a _TimeOutOfRange marker instead of raising DataError."""

    def __init__(self, oid: int, context: AdaptContext | None = None) -> None:
        super().__init__(oid, context)
        default = psycopg.adapters.get_loader(oid, psycopg.pq.Format.TEXT)
        assert default is not None
        self._load = default(oid, context).load

    def load(self, data: Any) -> datetime | _TimeOutOfRange:
        try:
            moment: datetime = self._load(data)
        except psycopg.DataError:
            return _TimeOutOfRange(bytes(data).decode(errors="replace"))
        return moment


class _Session:
    __slots__ = ("cur", "deferred_wake", "now", "queries", "received", "sent")

    def __init__(self, cur: psycopg.Cursor[Any], queries: dict[str, str], now: datetime | None) -> None:
        self.cur = cur
        self.queries = queries
        self.now = now
        self.deferred_wake = False
        self.sent: list[psycopg.Cursor[Any]] = []
        self.received: list[list[Row]] = []

    def q(self, name: str, /, **params: Any) -> list[Row]:
        return self.q_text(self.queries[name], **params)

    def send(self, name: str, /, **params: Any) -> None:
        """Queue a named statement in pipeline mode, on a cursor of its own: its rows are
        read by `receive` once the pipeline has synced (no round trip per statement)."""
        params["now"] = self.now
        cur = self.cur.connection.cursor()
        cur.execute(self.queries[name], params)
        self.sent.append(cur)

    def receive(self) -> None:
        """After the sync: read the rows of each statement queued by `send`, in order."""
        for cur in self.sent:
            self.received.append(cur.fetchall() if cur.description is not None else [])
            cur.close()

    def q_text(self, sql: str, /, **params: Any) -> list[Row]:
        params["now"] = self.now
        self.cur.execute(sql, params)
        return self.cur.fetchall() if self.cur.description is not None else []

    def q_synced(self, name: str, /, **params: Any) -> list[Row]:
        """In pipeline mode: run a named statement now and return its rows (a sync point
        inside the transaction, one round trip with whatever was queued before it)."""
        params["now"] = self.now
        with self.cur.connection.pipeline():  # a nested block syncs when it ends
            self.cur.execute(self.queries[name], params)
        return self.cur.fetchall() if self.cur.description is not None else []


@contextmanager
def pipelined(conn: psycopg.Connection[Any], local: str | None = None) -> Iterator[psycopg.Cursor[Any]]:
    """One transaction in pipeline mode: BEGIN, the statements queued in the block and
    COMMIT travel together and are synced once, at the end (psycopg's own transaction
    block would sync at its start and end). After any error, roll back what is left.
    `local`: a statement run first (behind a pooler: the session settings, see POOLERS)."""
    try:
        with conn.pipeline(), conn.cursor() as cur:
            cur.execute("BEGIN")
            if local is not None:
                cur.execute(local)
            yield cur
            cur.execute("COMMIT")
    except BaseException:
        if not conn.broken and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.rollback()
        raise


@contextmanager
def begun(conn: psycopg.Connection[Any], begin: str) -> Iterator[None]:
    """One transaction opened by `begin` (behind a transaction pooler: BEGIN and the
    session's settings for this transaction, in one round trip), committed at the block's
    end, rolled back after any error."""
    try:
        conn.execute(begin)
        yield
        conn.execute("COMMIT")
    except BaseException:
        if not conn.broken and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.rollback()
        raise


class _AsyncSession:
    __slots__ = ("cur", "now", "queries")

    def __init__(self, cur: psycopg.AsyncCursor[Any], queries: dict[str, str], now: datetime | None) -> None:
        self.cur = cur
        self.queries = queries
        self.now = now

    async def q(self, name: str, /, **params: Any) -> list[Row]:
        params["now"] = self.now
        await self.cur.execute(self.queries[name], params)
        return await self.cur.fetchall() if self.cur.description is not None else []


def _usable(status: Any) -> None:
    if status == psycopg.pq.TransactionStatus.INERROR:
        raise ConfigurationError(
            "the connection's transaction has failed (a statement raised): roll it back before enqueueing"
        )
    if status == psycopg.pq.TransactionStatus.ACTIVE:
        raise ConfigurationError("the connection is busy running a statement: enqueue between statements")


_json = json.JSONEncoder(separators=(",", ":")).encode
_by_id = operator.attrgetter("id")


def finish_batches(outcomes: Sequence[Outcome]) -> list[tuple[str, dict[str, Any]]]:
    """The named statements (and parameters) that write `outcomes`: plain successes through
    `finish_succeeded`, every other outcome through `finish`, each batch as one JSON
    parameter, in id order (see PostgresStore.finish)."""
    plain: list[tuple[Any, ...]] = []
    other: list[tuple[Any, ...]] = []
    refused: list[tuple[Any, ...]] = []
    for o in sorted(outcomes, key=_by_id):  # (one pass: the hot path)
        if o.status == "succeeded" and o.history is None:
            plain.append((o.id, o.token, o.result, o.started))
        elif o.status == REFUSED:
            refused.append((o.id, o.token, o.error))
        else:
            other.append((o.id, o.token, o.status, o.result, o.error, o.retry_in, o.history, o.started))
    batches: list[tuple[str, dict[str, Any]]] = [
        (query, {"rows": _json(rows)}) for query, rows in (("finish_succeeded", plain), ("finish", other)) if rows
    ]
    if refused:  # last: settle_refused finds its rows there
        grace, (low, high) = UNKNOWN_TASK_GRACE, REFUSE_DELAY
        batches.append(("refuse", {"rows": _json(refused), "grace": grace, "delay_min": low, "delay_max": high}))
    return batches


def settle_refused(outcomes: Sequence[Outcome], batches: Sequence[tuple[str, Any]], written: Sequence[Any]) -> None:
    """Give each refused outcome the status the refuse statement wrote (`written`: the rows of
    each of `batches`, in order; the refuse batch is the last)."""
    if batches and batches[-1][0] == "refuse":
        statuses = {r[0]: r[1] for r in written[len(batches) - 1]}
        for o in outcomes:
            if o.status == REFUSED:
                o.written_status = statuses.get(o.id)


def _check_can_migrate(s: _Session, pending: Sequence[Any]) -> None:
    can, role, schema, search_path = s.q("probe_can_migrate")[0]
    if schema is None:
        raise ConfigurationError(
            f"no schema of the search_path {search_path!r} exists in this database: create it "
            f"(CREATE SCHEMA ...) or name an existing one in the URL's options=-csearch_path=..."
        )
    if not can:
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in pending)
        raise PermissionDenied(
            f"database role {role!r} lacks CREATE on schema {schema!r}, needed to apply migrations "
            f"{names}: run `rota migrate` as the schema's owner, or GRANT CREATE ON SCHEMA "
            f'"{schema}" TO "{role}"'
        )


def finished_schedules_lock(outcomes: Sequence[Outcome]) -> tuple[str, dict[str, Any]]:
    """The statement that locks the schedules of all of `outcomes`' runs in name order, before
    the batches of `finish_batches` in one transaction (see lock_finished_schedules)."""
    return "lock_finished_schedules", {"ids": [o.id for o in outcomes]}


def claim_call(
    owner: str,
    limit: int,
    queues: Sequence[str] | None,
    lease: float,
    start: int | None = None,
    since: dict[str, Any] | None = None,
) -> tuple[str, dict[str, Any]]:
    """The named claim statement and its parameters (the first `start` claimed runs start;
    `since`: where in the claim index it starts, ClaimFrom.params; None: the front)."""
    params: dict[str, Any] = {
        "owner": owner,
        "limit": limit,
        "lease": lease,
        "start": limit if start is None else start,
        **(FRONT if since is None else since),
    }
    if queues is None:
        return "claim", params
    return "claim_in_queues", {**params, "queues": list(queues)}


# Sent before a claim in its transaction (see claim_plan in queries.sql).
CLAIM_PLAN: tuple[str, dict[str, Any]] = ("claim_plan", {})


def claimed(rows: list[Row]) -> list[Claimed]:
    """Claimed runs in id order, decoded in one go and checked in one pass (typed_sound);
    a batch with a damaged row (such as a time read as _TimeOutOfRange) is decoded again row
    by row, each on its own, and the damaged one set aside (records.claimed_rows)."""
    rows.sort(key=_row_id)
    try:
        claims = list(starmap(Claimed, rows))
    except quarantine.UNDECODABLE:
        return claimed_rows(rows, _claim_of)
    return claims if typed_sound(claims) else claimed_rows(rows, _claim_of)


_row_id = operator.itemgetter(0)


def _claim_of(r: Row) -> Claimed:
    return Claimed(*r)


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


# SQLSTATEs that mean "try again": the operation was rolled back for a passing reason.
_TRANSIENT = {
    "40P01": "deadlock",
    "40001": "serialization failure",
    "25006": "read-only transaction",
    "55P03": "lock timeout",
    "25P03": "idle in a transaction for too long",
    "57014": "statement timeout",
    "57P01": "server shutting down",
    "57P02": "crash shutdown",
    "57P03": "server starting",
}
_RETRY_AT_ONCE = ("40P01", "40001")  # deadlock, serialization failure: retried in the store
_KEEPALIVES = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 3, "keepalives_count": 3}


# A statement psycopg prepared on one server connection and used on another: the symptom
# of a transaction pooler rota was not told about (26000: does not exist, 42P05: exists).
_POOLER_SYMPTOMS = ("26000", "42P05")
_POOLER_HINT = (
    "; rota's connections seem to go through a transaction-mode pooler (PgBouncer): "
    "set ROTA_POOLER=transaction (App(pooler='transaction')), see the deploy guide"
)


def _translate(exc: psycopg.Error, url: str) -> DatabaseError:
    where = f"PostgreSQL at {redact(url)}: {_reason(exc)}"
    if exc.sqlstate in _POOLER_SYMPTOMS and '"_pg3_' in str(exc):
        return DatabaseError(where + _POOLER_HINT)
    kind = _TRANSIENT.get(exc.sqlstate or "")
    if kind is not None:
        return DatabaseTransient(f"{where} ({kind}; transient, try again)")
    if isinstance(exc, psycopg.OperationalError):
        return DatabaseUnavailable(where)
    return DatabaseError(where)


def _is_retry_at_once(exc: DatabaseError) -> bool:
    cause = exc.__cause__
    return isinstance(cause, psycopg.Error) and cause.sqlstate in _RETRY_AT_ONCE


def check_conninfo(url: str) -> None:
    """Refuse a URL libpq cannot parse (an unknown parameter such as `sslmod`, a bad
    percent-encoding) at once, in one line that names it, suggests the parameter meant and
    shows no password: psycopg would raise it, with the password echoed, at first use."""
    try:
        psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        reason = redact_text(_reason(exc), url)
        named = re.search(r'(?:parameter|option):? "([^"]*)"', reason)
        if named and "=" not in named[1]:
            keywords = [d.keyword.decode() for d in psycopg.pq.Conninfo.get_defaults()]
            reason += did_you_mean(named[1], keywords)
        raise ConfigurationError(f"invalid PostgreSQL URL {redact(url)} ({reason})") from None


def _connect_kwargs(url: str, connect_timeout: float, pooled: bool = False) -> dict[str, Any]:
    """Autocommit, a connect timeout, and TCP keepalives unless the URL sets its own: notice
    a vanished server, host or network within about 20 s, not the kernel's two hours.
    `pooled` (a transaction pooler): no prepared statements."""
    given = psycopg.conninfo.conninfo_to_dict(url)
    kwargs: dict[str, Any] = {"autocommit": True, "connect_timeout": max(1, round(connect_timeout))}
    if pooled:
        kwargs["prepare_threshold"] = None
    kwargs.update({k: v for k, v in _KEEPALIVES.items() if k not in given})
    return kwargs


# How the store reaches PostgreSQL: directly (or through a session pooler), or through a
# transaction pooler (PgBouncer's pool_mode=transaction), which hands each transaction to
# any server connection: then nothing may outlive a transaction. psycopg prepares no
# statement (prepare_threshold=None), the timeouts are set per transaction (set_config(...,
# true), with BEGIN: no round trip more; single statements outside a transaction keep the
# server's defaults), and LISTEN goes to listen_url or not at all (the workers poll).
POOLERS = ("none", "transaction")


def check_pooler(pooler: str | None) -> bool:
    """Whether `pooler` names a transaction pooler; ConfigurationError for an unknown value."""
    if pooler is None or pooler == "none":
        return False
    if pooler == "transaction":
        return True
    raise ConfigurationError(f"pooler must be one of {', '.join(POOLERS)}, got {pooler!r}")


def local_settings(settings: dict[str, str]) -> str | None:
    """The statement setting `settings` for one transaction only (None: nothing to set)."""
    if not settings:
        return None
    terms = ", ".join(f"set_config('{name}', {value}, true)" for name, value in settings.items())
    return f"SELECT {terms}"


def _session_settings(**seconds: float | None) -> dict[str, str]:
    """SET values bounding every transaction rota opens (None or 0: the server's default)."""
    settings = {}
    for name, value in seconds.items():
        if value is None:
            continue
        if not isinstance(value, int | float) or value < 0:
            option = "idle_in_transaction_timeout" if name.startswith("idle") else name
            raise ConfigurationError(f"{option} must be a number of seconds >= 0 or None, got {value!r}")
        settings[name] = f"'{round(value * 1000)}ms'"
    return settings


def tick_bounds(lock_timeout: float, idle_timeout: float) -> str:
    """The statement that opens a tick's transaction: two bounds, for it only.

    Waiting: another host's tick transaction may hold this tick's rows; give up after
    `lock_timeout` (tick_lock_timeout, 0.5 s) and go on with the other schedules; the next
    pass tries again. Holding: a host frozen or cut off after it sent a tick's statements
    and before COMMIT keeps the tick's unique-index entry and the schedule's row locked, and
    until its transaction ends no other host can make that tick or any later one of the
    schedule (they all wait on that row and on next_run_at's compare-and-set). PostgreSQL
    ends a session idle in a transaction after idle_in_transaction_session_timeout; the
    store's (60 s, which handlers' transactions get too) is far too long for a schedule
    that ticks every second, so a tick's transaction sets `idle_timeout` (tick_idle_timeout,
    1 s: well under any lease). Its statements go back to back, so a healthy host is never
    idle that long in it; a frozen one loses the transaction (rolled back: its tick is
    unmade, the session ended, 25P03 transient) and the other hosts make that tick and the
    later ones at their next pass, about a second late. We chose this over a lock-free
    one-row-per-tick insert: that row would still wait on the frozen host's uncommitted row
    for the same tick, and the compare-and-set is what keeps catch-up and misfire plans
    single across hosts. The values are integers we format: nothing is injected."""
    bounds = {"tick_lock_timeout": lock_timeout, "tick_idle_timeout": idle_timeout}
    for option, value in bounds.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ConfigurationError(f"{option} must be a positive number of seconds, got {value!r}")
    lock_ms, idle_ms = (max(1, round(value * 1000)) for value in bounds.values())
    return (
        f"SELECT set_config('lock_timeout', '{lock_ms}', true), "
        f"set_config('idle_in_transaction_session_timeout', '{idle_ms}', true)"
    )


# What the server says when it refuses a connection for a reason that waiting will not fix
# (libpq gives no SQLSTATE for a failed connection: its message is all there is). Exact
# phrases only: LDAP, RADIUS or PAM "authentication failed" may pass (their server is away).
_REFUSALS = re.compile(
    r'FATAL:\s+(?:database "[^"]*" does not exist|role "[^"]*" does not exist'
    r"|password authentication failed for user|no pg_hba\.conf entry for)"
)


def refused(exc: BaseException) -> bool:
    """Whether a failed connection was refused by the server for good (see _REFUSALS)."""
    return _REFUSALS.search(str(exc)) is not None


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _message(error_json: str) -> str:
    return str(json.loads(error_json)["message"])
