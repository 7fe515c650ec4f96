"""MySQL and MariaDB connections: the URL, the settings every session gets, a small pool of
PyMySQL connections, the session that runs named queries, and error translation.

Every connection is set up the same way, whatever the server's defaults: `time_zone` UTC
(DATETIME(6) columns hold UTC), READ COMMITTED (no gap locks: claimers and finishers lock the
rows they touch and nothing between them), a strict `sql_mode`, and a lock wait bound.
"""

from __future__ import annotations

import re
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from ...config import redact_url as redact
from ...errors import (
    ConfigurationError,
    DatabaseError,
    DatabaseRefused,
    DatabaseTransient,
    DatabaseUnavailable,
    PermissionDenied,
)
from ..forks import fork_safe

try:
    import pymysql
    import pymysql.converters
    from pymysql.constants import FIELD_TYPE
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ConfigurationError("MySQL and MariaDB support needs PyMySQL: pip install 'rota[mysql]'") from exc

Row = tuple[Any, ...]
DriverError = pymysql.Error
SQL_MODE = "STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION"
DEADLOCK, LOCK_WAIT = 1213, 1205
_GONE = {2003, 2006, 2013, 2055, 1927, 4031}  # refused, gone away, lost, cut by the server
# A statement over the server's max_allowed_packet: refused (1153) or, larger, cut while it was
# being written (the server resets the connection: 2006/2013, an outage's codes otherwise)
PACKET_TOO_LARGE, _CUT_WRITING = 1153, {2006, 2013}
# An outage as PostgreSQL's OperationalErrors and 57P01 are: no connection to be had now.
_BUSY = {
    1040: "too many connections",
    1203: "the server's max_user_connections",
    1226: "the account's connection or query limit",
    1053: "server shutting down",
}
# The statement (not the session) ended for a passing reason, as PostgreSQL's 57014.
_INTERRUPTED = {
    1317: "statement interrupted (KILL QUERY)",
    1969: "statement timeout (max_statement_time)",
    3024: "statement timeout (max_execution_time)",
    1637: "too many active transactions",
}
_FOR_GOOD = {1044, 1045, 1049, 1698}  # access denied, unknown database: no retry helps
_DENIED = {1142, 1143, 1227, 1370}  # a command refused on a table, a column, a privilege
_STEP = re.compile(r"^;\s*$", re.MULTILINE)  # the line that ends one step of a named query


def _utc_datetime(text: str | bytes) -> Any:
    """DATETIME columns as aware UTC datetimes (the session's time_zone is UTC): the server's
    text read by fromisoformat with the offset appended (a tenth of PyMySQL's regular
    expression's cost: three a claimed run), anything else (a zero date, a hand edit) as
    PyMySQL reads it."""
    if len(text) >= 19:  # date and time (a date alone: PyMySQL's date)
        try:
            return datetime.fromisoformat(f"{text.decode() if isinstance(text, bytes) else text}+00:00")
        except ValueError:
            pass
    value = pymysql.converters.convert_datetime(text)
    return value.replace(tzinfo=UTC) if isinstance(value, datetime) else value


def _number(text: str | bytes) -> int | float:
    """DECIMAL results (SUM, UNIX_TIMESTAMP) as int or float, as the other drivers give them."""
    value = text.decode() if isinstance(text, bytes) else text
    return float(value) if "." in value or "e" in value.lower() else int(value)


CONVERSIONS = {
    **pymysql.converters.conversions,
    FIELD_TYPE.DATETIME: _utc_datetime,
    FIELD_TYPE.TIMESTAMP: _utc_datetime,
    FIELD_TYPE.NEWDECIMAL: _number,
    FIELD_TYPE.DECIMAL: _number,
}


def connect_kwargs(url: str, connect_timeout: float, lock_wait: int) -> dict[str, Any]:
    """PyMySQL's arguments for mysql://user:password@host:port/database (mariadb:// too)."""
    parsed = urlparse(url)
    database = unquote(parsed.path.lstrip("/"))
    if not database or "/" in database:
        raise ConfigurationError(
            f"invalid MySQL URL {redact(url)!r}: name the database, e.g. mysql://user:password@127.0.0.1:3306/rota"
        )
    options = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    unknown = sorted(set(options) - {"unix_socket", "ssl_ca", "ssl_disabled"})
    if unknown:
        raise ConfigurationError(
            f"unknown MySQL URL option(s) {unknown} in {redact(url)!r}; valid: unix_socket, ssl_ca, ssl_disabled"
        )
    try:
        port = parsed.port or 3306
    except ValueError as exc:
        raise ConfigurationError(f"invalid port in MySQL URL {redact(url)!r}: {exc}") from None
    kwargs: dict[str, Any] = {
        "host": parsed.hostname or "127.0.0.1",
        "port": port,
        "user": unquote(parsed.username or "root"),
        "password": unquote(parsed.password or ""),
        "database": database,
        "charset": "utf8mb4",
        "autocommit": True,
        "connect_timeout": max(1, round(connect_timeout)),
        "conv": CONVERSIONS,
        "init_command": (f"SET time_zone = '+00:00', sql_mode = '{SQL_MODE}', innodb_lock_wait_timeout = {lock_wait}"),
    }
    if "unix_socket" in options:
        kwargs["unix_socket"] = options["unix_socket"]
    if "ssl_ca" in options:
        kwargs["ssl"] = {"ca": options["ssl_ca"]}
    if options.get("ssl_disabled", "").lower() in ("1", "true", "yes"):
        kwargs["ssl_disabled"] = True
    return kwargs


class Pool:
    """At most `size` connections, handed out one per session; a connection that failed is
    closed instead of returned (the next session opens a new one)."""

    def __init__(self, url: str, kwargs: dict[str, Any], size: int, timeout: float) -> None:
        self.url = url
        self.kwargs = kwargs
        self.size = size
        self.timeout = timeout
        self._idle: deque[pymysql.connections.Connection[Any]] = deque()
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._closed = False
        self.isolation: str | None = None  # the statement that sets READ COMMITTED (by server)
        self.bounds: str | None = None  # the session bounds the server has (see migrate._check_server)
        fork_safe(self)

    def after_fork(self) -> None:
        """In a forked child: the idle connections are the parent's (its sockets, its
        sessions on the server); drop them without a goodbye and start afresh."""
        idle, self._idle = list(self._idle), deque()
        for conn in idle:
            abandon(conn)
        self._slots = threading.BoundedSemaphore(self.size)  # (a parent thread's slots are gone)
        self._lock = threading.Lock()

    def new_connection(self) -> pymysql.connections.Connection[Any]:
        """A connection set up as the pool's, outside the pool (the store's token connection)."""
        return self._new()

    def _new(self) -> pymysql.connections.Connection[Any]:
        try:
            conn = pymysql.connect(**self.kwargs)
        except pymysql.Error as exc:
            raise translate(exc, self.url) from exc
        keepalive(conn)
        try:
            with conn.cursor() as cur:
                cur.execute(self.isolation or "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                if self.bounds:
                    cur.execute(self.bounds)
        except pymysql.Error as exc:
            conn.close()
            raise translate(exc, self.url) from exc
        return conn

    @contextmanager
    def connection(self) -> Iterator[pymysql.connections.Connection[Any]]:
        if self._closed:
            raise DatabaseError("the store is closed")
        if not self._slots.acquire(timeout=self.timeout):
            raise DatabaseTransient(
                f"MySQL at {redact(self.url)}: all {self.size} pooled connections stayed busy for "
                f"{self.timeout:g} s (pool_size); try again"
            )
        conn = None
        try:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                conn = self._new()
            yield conn
        except pymysql.Error:
            if conn is not None:  # it may be broken: a new one for the next session
                close_quietly(conn)
                conn = None
            raise
        finally:
            if conn is not None:
                with self._lock:
                    if self._closed:
                        close_quietly(conn)
                    else:
                        self._idle.append(conn)
            self._slots.release()

    def drop_idle(self) -> None:
        with self._lock:
            idle, self._idle = list(self._idle), deque()
        for conn in idle:
            close_quietly(conn)

    def close(self) -> None:
        self._closed = True
        self.drop_idle()


# TCP keepalives as the PostgreSQL store's: a server, host or network gone without a reset is
# noticed in about 20 s (PyMySQL turns keepalives on with the kernel's timing: 2 hours).
_KEEPALIVE = {"TCP_KEEPIDLE": 10, "TCP_KEEPINTVL": 3, "TCP_KEEPCNT": 3}


def keepalive(conn: pymysql.connections.Connection[Any]) -> None:
    sock = getattr(conn, "_sock", None)
    if sock is None or (sock.family != socket.AF_INET and sock.family != socket.AF_INET6):
        return  # (a Unix socket has no peer to lose)
    for option, value in _KEEPALIVE.items():
        if hasattr(socket, option):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


def abandon(conn: pymysql.connections.Connection[Any]) -> None:
    """Forget a connection inherited across fork(): close this process's copy of its socket
    only. `close()` would send COM_QUIT, and the server would end the parent's session."""
    getattr(conn, "_force_close", lambda: None)()


def close_quietly(conn: pymysql.connections.Connection[Any]) -> None:
    try:
        conn.close()
    except Exception:  # a broken connection fails to say goodbye: drop its socket
        getattr(conn, "_force_close", lambda: None)()


class Session:
    """One connection, in a transaction or in autocommit. `q` runs a named query. A query of
    several steps (separated by a line holding only `;`) emulates UPDATE ... RETURNING, which
    MySQL lacks: its first SELECT selects the ids of the rows to change (locking them), the
    next steps change those rows (`%(_ids)s`: the ids as a list for IN; `%(_idlist)s`: the
    same ids as a comma list, in the order selected, for FIND_IN_SET), and the rows of the
    last step that returned rows are the query's rows. No ids: nothing more runs. Steps
    before the first SELECT (an INSERT) just run."""

    __slots__ = ("after", "conn", "counter", "cur", "in_tx", "now", "queries", "settle", "wake")

    def __init__(
        self,
        conn: Any,
        queries: dict[str, str],
        now: datetime | None,
        in_tx: bool,
        settle: Callable[[Session, list[int]], None] | None = None,
    ) -> None:
        self.conn = conn
        self.cur = conn.cursor()
        self.queries = queries
        self.now = now
        self.in_tx = in_tx
        self.settle = settle  # after a query in ENDING, with the ids it changed (see hot_path.settle)
        self.wake: list[str] = []
        self.counter = False  # this transaction locked the token counter's row (COUNTER)
        self.after: list[str] = []  # run once the transaction ended (a setting put back)

    def q(self, name: str, /, **params: Any) -> list[Row]:
        if name in COUNTER:
            self.counter = self.in_tx
        return self.q_text(self.queries[name], _ending=name in ENDING, **params)

    def q_text(self, sql: str, /, _ending: bool = False, **params: Any) -> list[Row]:
        params["now"] = self.now
        steps = _steps(sql)
        if len(steps) == 1:
            self._execute(steps[0], params)
            return list(self.cur.fetchall()) if self.cur.description else []
        if self.in_tx:
            return self._run_steps(steps, params, _ending)
        self.conn.begin()
        try:
            rows = self._run_steps(steps, params, _ending)
            self.conn.commit()
        except BaseException:
            with suppress(pymysql.Error):  # a cut connection: its own error says why
                self.conn.rollback()
            raise
        return rows

    def _execute(self, sql: str, params: dict[str, Any]) -> None:
        try:
            self.cur.execute(sql, params)
        except pymysql.OperationalError as exc:  # its size, for translate (a packet too large?)
            if exc.args and exc.args[0] in (PACKET_TOO_LARGE, *_CUT_WRITING):
                exc.rota_sent = len(sql) + sum(_size(v) for v in params.values())  # type: ignore[attr-defined]
            raise

    def _run_steps(self, steps: list[str], params: dict[str, Any], ending: bool = False) -> list[Row]:
        rows = self._steps(steps, params)
        if ending and rows and self.settle is not None:
            self.settle(self, [int(i) for i in params["_ids"]])
        return rows

    def _steps(self, steps: list[str], params: dict[str, Any]) -> list[Row]:
        rows: list[Row] = []
        bound = False
        for step in steps:
            self._execute(step, params)
            if self.cur.description is None:
                continue
            rows = list(self.cur.fetchall())
            if not bound:  # the rows to change: none, nothing more to do
                bound = True
                if not rows:
                    return []
                params["_ids"] = [r[0] for r in rows]
                params["_idlist"] = ",".join(str(r[0]) for r in rows)
                params["_n"] = len(rows)
        return rows


# The statements that may end runs whose end changes others (an exclusive schedule's held
# run, dependents): what PostgreSQL's and SQLite's triggers do after them, the store does.
ENDING = frozenset({
    "cancel_pending", "rescue", "lease_damaged", "cancel_active_pending", "cancel_held", "cancel_schedule_pending",
    "withdraw_ahead", "misfire_ahead", "deps_orphaned", "flow_keyless", "flow_skip_unkeyed", "refuse",
    "disown", "finish_transactional", "park",
})  # fmt: skip

# The queries that lock the token counter's row to the transaction's end: a claim later in
# that transaction takes its tokens in it too (its token connection would wait for this one).
COUNTER = frozenset({"flow_lock", "next_token", "take_token", "take_tokens"})

_split: dict[str, list[str]] = {}


def _steps(sql: str) -> list[str]:
    steps = _split.get(sql)
    if steps is None:
        steps = _split[sql] = [s.strip() for s in _STEP.split(sql) if s.strip()]
    return steps


# A session idle inside a transaction for this long is ended by the server (MariaDB's
# idle_transaction_timeout; MySQL has none): a host frozen or cut off without a reset after it
# locked the token counter (a claim) or a schedule's row (a tick) would else hold them until
# wait_timeout (8 hours). As PostgreSQL's idle_in_transaction_session_timeout, 60 s; a tick's
# transaction, whose statements go back to back, 1 s (PostgreSQL's tick_idle_timeout), and it
# waits at most 1 s for a row another host holds (innodb_lock_wait_timeout's least).
IDLE_IN_TRANSACTION, TICK_IDLE, TICK_LOCK_WAIT = 60, 1, 1


def _size(value: Any) -> int:
    """About how many bytes a parameter takes in a statement."""
    if isinstance(value, str):
        return len(value.encode("utf-8", "replace"))
    if isinstance(value, bytes | bytearray):
        return len(value)
    if isinstance(value, list | tuple):
        return sum(_size(v) for v in value)
    return 8


def translate(exc: pymysql.Error, url: str, max_packet: int | None = None) -> DatabaseError:
    """A driver's error as rota's. `max_packet`: the server's max_allowed_packet (bytes): a
    statement larger than it whose connection was cut while it was sent is refused for its
    size, not an outage."""
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
    text = exc.args[1] if len(exc.args) > 1 else str(exc)
    where = f"MySQL at {redact(url)}"
    sent = int(getattr(exc, "rota_sent", 0))
    if code == PACKET_TOO_LARGE or (code in _CUT_WRITING and max_packet and sent > max_packet):
        return _too_large(where, sent, max_packet)
    if code in (DEADLOCK, LOCK_WAIT):
        return DatabaseTransient(f"{where}: {text} (rolled back; try again)")
    if code in _FOR_GOOD:
        return DatabaseRefused(f"cannot connect to {where}: {text}")
    if code in _GONE or isinstance(exc, pymysql.err.InterfaceError):
        return DatabaseUnavailable(f"{where}: {text or 'the connection is closed'}")
    if code in _BUSY:
        return DatabaseUnavailable(f"{where}: {text} ({_BUSY[code]}; transient, try again)")
    if code in _INTERRUPTED:
        return DatabaseTransient(f"{where}: {text} ({_INTERRUPTED[code]}; transient, try again)")
    if code in _DENIED:
        return PermissionDenied(f"{where}: {text}")
    said = str(text).lower()  # (1792: "... in a READ ONLY transaction", also under tx_read_only)
    if code in (1290, 1792, 1836) or "read-only" in said or "read only" in said:
        return DatabaseTransient(f"{where}: {text} (the server is read-only for now)")
    return DatabaseError(f"{where}: {text}")


def _too_large(where: str, sent: int, max_packet: int | None) -> DatabaseError:
    size = f"of about {sent:,} bytes " if sent else ""
    limit = f" ({max_packet:,} bytes)" if max_packet else ""
    return DatabaseError(
        f"{where}: a statement {size}is larger than the server's max_allowed_packet{limit}: send a smaller "
        "signal payload, task arguments or result (keep large data elsewhere and pass a reference), or raise "
        "max_allowed_packet on the server"
    )


def is_retry_at_once(exc: DatabaseError) -> bool:
    """A deadlock (1213): the server rolled the transaction back whole; run it again at once."""
    cause = exc.__cause__
    return isinstance(cause, pymysql.Error) and bool(cause.args) and cause.args[0] in (DEADLOCK, LOCK_WAIT)


VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)")


def check_version(version: str, url: str) -> str:
    """'MariaDB 10.11' or 'MySQL 8.0': refused below MariaDB 10.6 and MySQL 8.0 (SKIP LOCKED,
    JSON_TABLE, window functions)."""
    match = VERSION.match(version)
    numbers = tuple(int(n) for n in match.groups()) if match else (0, 0, 0)
    maria = "mariadb" in version.lower()
    kind, least = ("MariaDB", (10, 6, 0)) if maria else ("MySQL", (8, 0, 4))
    if numbers < least:
        raise DatabaseRefused(
            f"{kind} {version} at {redact(url)} is too old for rota: it needs MariaDB 10.6+ or MySQL 8.0.4+ "
            "(FOR UPDATE SKIP LOCKED, JSON_TABLE)"
        )
    return f"{kind} {numbers[0]}.{numbers[1]}"
