"""The SQLite store: one file, zero set-up, many processes on one host.

WAL mode lets readers and one writer work at the same time; every write is a short
`BEGIN IMMEDIATE` transaction (taking the write lock up front, so two writers never deadlock
upgrading a read lock), and `busy_timeout` makes a writer wait its turn instead of failing.
Limits, plainly: one host only (SQLite over a network file system is not safe), writers are
serialized (claims and completions are batched so that matters little), and there is no
server push — idle workers in other processes notice new work through `PRAGMA data_version`,
a cheap in-memory check, instead of LISTEN/NOTIFY. The database clock is this host's clock.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlparse

from ...clock import Clock
from ...errors import (
    ConfigurationError,
    DatabaseError,
    DatabaseUnavailable,
    PermissionDenied,
)
from ..base import Claimed, NewRun, Outcome, Rescued, run_stats
from ..records import claim_of_unix, claimed_rows, rescued_rows
from ..sqlstore.flow import _gates
from ..sqlstore.outcomes import by_statement, held_outcomes
from ..sqlstore.queries import latest_version, load_migrations, load_queries
from ..sqlstore.stepwise_flow import StepwiseFlow
from ..sqlstore.store import NOTIFY_CHANNEL, SqlStore
from ..sqlstore.token_counter import next_token
from .connection import (
    Connections,
    Writers,
    _busy_timeout,
    _check_not_newer,
    _Session,
    _statements,
    _translate,
    _user,
    create_private,
    json_batch,
    sqlite_path,
)
from .handler_tx import sqlite_handler_tx

_SYNCHRONOUS = ("off", "normal", "full", "extra")


class SQLiteStore(StepwiseFlow, SqlStore):
    dialect = "sqlite"

    def __init__(self, url: str, clock: Clock | None = None) -> None:
        super().__init__(url, clock)
        self.path = sqlite_path(url)
        options = {k: v[-1] for k, v in parse_qs(urlparse(url).query).items()}
        self.synchronous = options.pop("synchronous", "full").lower()
        if self.synchronous not in _SYNCHRONOUS:
            raise ConfigurationError(
                f"invalid synchronous={self.synchronous!r} in {url!r}; valid values are {', '.join(_SYNCHRONOUS)}"
            )
        self.busy_timeout = _busy_timeout(options.pop("busy_timeout", "30"), url)
        self._writers = Writers(self.path, self.busy_timeout)
        if options:
            raise ConfigurationError(
                f"unknown SQLite URL option(s) {sorted(options)} in {url!r}; valid: synchronous, busy_timeout"
            )
        self.queries = load_queries("sqlite", ":now")
        self._conns = Connections(self._open_conn)
        self.listeners: list[Any] = []  # in-process wake-up callbacks (workers of this process)
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(directory):
            raise DatabaseUnavailable(
                f"cannot open SQLite database {self.path!r}: the directory {directory!r} does not exist"
            )

    # -- connections ---------------------------------------------------------------------
    def _open_conn(self) -> sqlite3.Connection:
        try:
            create_private(self.path)
            conn = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=self.busy_timeout,
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.synchronous.upper()}")
            conn.execute("PRAGMA recursive_triggers=ON")  # dependents' cancellation cascades (0010)
        except sqlite3.Error as exc:
            self._check_file()  # a file or directory this user cannot write: refused, not retried
            raise DatabaseUnavailable(f"cannot open SQLite database {self.path!r}: {exc}") from exc
        return conn

    def _conn(self) -> sqlite3.Connection:
        """The calling thread's connection, outside the close() fence (store calls use `_conns.use()`)."""
        if self._conns.closed:
            raise DatabaseError("the store is closed")
        return self._conns.get()

    @property
    def _all(self) -> dict[threading.Thread, sqlite3.Connection]:
        return self._conns.all

    def _now(self) -> float:
        return self.clock.now().timestamp() if self.clock is not None else time.time()

    def host_clock(self) -> float:
        """The database's clock: this host's (or the FakeClock), as Unix seconds."""
        return self._now()

    @contextmanager
    def _tx(self) -> Iterator[_Session]:
        # writers queue (Writers) instead of meeting in SQLite's busy handler's millisecond sleeps
        with self._writers, self._conns.use() as conn:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise _translate(exc, self.path) from exc
            session = _Session(conn, self.queries, self._now())
            try:
                yield session
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                conn.execute("ROLLBACK")
                raise _translate(exc, self.path) from exc
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        for payload in session.wake:
            for callback in list(self.listeners):
                callback(payload)

    @contextmanager
    def _read(self) -> Iterator[_Session]:
        with self._conns.use() as conn:
            try:
                yield _Session(conn, self.queries, self._now())
            except sqlite3.Error as exc:
                raise _translate(exc, self.path) from exc

    def close(self) -> None:
        """Refuse further calls and close the connections (a call under way on another
        thread ends first: its thread then closes its connection, see Connections)."""
        self._conns.close()
        self._writers.close()

    def data_version(self) -> int:
        """Changes whenever another connection commits: a cheap 'anything new?' probe."""
        with self._conns.use() as conn:
            try:
                return int(conn.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error as exc:
                raise _translate(exc, self.path) from exc

    def release_thread(self) -> None:
        """Close the calling thread's connection (a thread that is about to end)."""
        self._conns.release()

    # -- value conversions ---------------------------------------------------------------
    def _ts(self, value: datetime | None) -> Any:
        return value.timestamp() if value is not None else None

    def _dt(self, value: Any) -> datetime | None:
        return datetime.fromtimestamp(value, UTC) if value is not None else None

    def _names(self, values: Sequence[str] | None) -> Any:
        return json.dumps(list(values)) if values is not None else None

    def _p(self, name: str) -> str:
        return f":{name}"

    def _notify(self, s: Any, payload: str) -> None:
        s.wake.append(payload)  # delivered to this process's workers after COMMIT

    # -- the permission probe -------------------------------------------------------------
    def check_writable(self) -> None:
        self._check_file()
        super().check_writable()

    def _check_file(self) -> None:
        """Say plainly when the file or its directory is read-only for this user."""
        directory = os.path.dirname(os.path.abspath(self.path))
        user = _user()
        if os.path.exists(self.path) and not os.access(self.path, os.W_OK):
            mode = stat.filemode(os.stat(self.path).st_mode)
            raise PermissionDenied(
                f"cannot write the SQLite database {self.path!r}: the file is read-only for {user} "
                f"(mode {mode}{_refused(self.path)}); a worker and `rota migrate` must write it: make it "
                "writable (chmod u+w)"
            )
        if not os.access(directory, os.W_OK):
            raise PermissionDenied(
                f"cannot write in {directory!r}, the directory of the SQLite database {self.path!r}, as "
                f"{user} (mode {stat.filemode(os.stat(directory).st_mode)}{_refused(directory)}): SQLite "
                "creates the file and its journal files (-wal, -shm) there; make it writable"
            )

    # -- migrations ----------------------------------------------------------------------
    def schema_version(self) -> tuple[int, int]:
        latest = latest_version(load_migrations("sqlite"))
        with self._read() as s:
            exists = s.q_text("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'rota_migrations'")
            if not exists:
                return 0, latest
            return int(s.q_text("SELECT coalesce(max(version), 0) FROM rota_migrations")[0][0]), latest

    def migrate(self, *, dry_run: bool = False) -> list[str]:
        migrations = load_migrations("sqlite")
        if not dry_run:
            self._check_file()
        with self._tx() as s:
            s.q_text(
                "CREATE TABLE IF NOT EXISTS rota_migrations "
                "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
            current = int(s.q_text("SELECT coalesce(max(version), 0) FROM rota_migrations")[0][0])
            _check_not_newer(current, latest_version(migrations), self.path)
            applied = []
            for m in [m for m in migrations if m.version > current]:
                applied.append(f"{m.version:04d}_{m.name}")
                if dry_run:
                    continue
                for statement in _statements(m.sql):
                    s.conn.execute(statement)
                s.q_text(
                    "INSERT INTO rota_migrations (version, name, applied_at) VALUES (:v, :n, datetime(:now, 'unixepoch'))",
                    v=m.version,
                    n=m.name,
                )
            return applied

    # -- enqueue -------------------------------------------------------------------------
    def _insert_plain(self, s: Any, runs: Sequence[NewRun]) -> list[int]:
        base = int(s.q("next_run_ids")[0][0])
        ids = list(range(base + 1, base + len(runs) + 1))
        now = s.now
        gated = any(r.limit_name is not None or r.rate_name is not None for r in runs)
        sql = self.queries["insert_runs_bulk_gated" if gated else "insert_runs_bulk"]
        s.conn.executemany(
            sql,
            (
                {
                    "id": run_id,
                    "task": r.task,
                    "queue": r.queue,
                    "priority": r.priority,
                    "args": r.args,
                    "kwargs": r.kwargs,
                    "scheduled_for": r.scheduled_for.timestamp() if r.scheduled_for is not None else None,
                    "delay": r.delay,
                    "max_attempts": r.max_attempts,
                    "timeout": r.timeout,
                    "backoff": r.backoff,
                    "now": now,
                    **_gates(r),  # read by insert_runs_bulk_gated only
                }
                for run_id, r in zip(ids, runs, strict=True)
            ),
        )
        return ids

    @contextmanager
    def foreign_session(self, conn: sqlite3.Connection) -> Iterator[_Session]:
        """A session on a caller's connection, in whatever transaction it has open (its
        commit or rollback decides). Refused unless it is on this store's file, migrated.
        Workers notice the commit through PRAGMA data_version."""
        cur = conn.cursor()
        cur.row_factory = None
        session = _Session(cur, self.queries, self._now())
        try:
            path, tables, _ = session.q("store_identity")[0]
            if not path or not os.path.exists(path) or not os.path.samefile(path, self.path):
                raise ConfigurationError(
                    f"the connection is to the SQLite database {path or ':memory:'!r}, not to this app's "
                    f"store {os.path.abspath(self.path)!r}: enqueue in a transaction of the store's own file"
                )
            if not tables:
                raise ConfigurationError(
                    f"the SQLite database {path!r} has no rota tables yet: call app.migrate() once at "
                    "start-up (outside the transaction)"
                )
            yield session
        except sqlite3.Error as exc:
            raise _translate(exc, self.path) from exc
        finally:
            cur.close()

    def handler_transaction(self) -> Any:
        return sqlite_handler_tx(self)

    # -- the worker's hot path -----------------------------------------------------------
    def _plain_claim(
        self, owner: str, limit: int, queues: Sequence[str] | None, lease: float, start: int | None = None
    ) -> list[Claimed]:
        with self._tx() as s:
            rows = self._claim(s, owner, limit, queues, lease, start)
        return _claimed(rows)

    def claim_ahead(
        self, owner: str, limit: int, queues: Sequence[str] | None, lease: float, ahead: float
    ) -> list[Claimed]:
        with self._tx() as s:
            rows = self._claim(s, owner, limit, queues, lease, 0, ahead)
        return _claimed(rows)

    def _claim(
        self,
        s: _Session,
        owner: str,
        limit: int,
        queues: Sequence[str] | None,
        lease: float,
        start: int | None,
        ahead: float | None = None,
    ) -> list[Any]:
        """claim (the first `start` started), or with `ahead` claim_ahead (all held)."""
        token = next_token(s)
        params: dict[str, Any] = {"owner": owner, "token": token, "lease": lease, "limit": limit}
        if ahead is None:
            params["start"], name = limit if start is None else start, "claim"
        else:
            params["ahead"], name = ahead, "claim_ahead"
        if queues is None:
            rows = s.q(name, **params)
        else:
            rows = s.q(name + "_in_queues", **params, queues=self._names(queues))
        if rows:  # an empty claim writes nothing (other processes' data_version stays put)
            s.q("take_token", token=token + len(rows) - 1)  # one token per claimed run
        return rows

    def _plain_finish_and_claim(
        self,
        outcomes: Sequence[Outcome],
        owner: str,
        limit: int,
        queues: Sequence[str] | None,
        lease: float,
        start: int | None = None,
    ) -> tuple[set[int], list[Claimed]]:
        with self._tx() as s:
            written = self._finish(s, outcomes)
            rows = self._claim(s, owner, limit, queues, lease, start)
        return written, _claimed(rows)

    def start(self, held: Sequence[tuple[int, int, float]]) -> set[int]:
        started: set[int] = set()
        if not held:
            return started
        with self._tx() as s:
            for run_id, token, ago in held:
                if s.q("start", id=run_id, token=token, ago=ago):
                    started.add(run_id)
        return started

    def _claimed_rows(self, rows: list[Any]) -> list[Claimed]:
        return _claimed(rows)

    def heartbeat(self, held: Sequence[tuple[int, int]], lease: float) -> tuple[set[int], set[int]]:
        alive: set[int] = set()
        cancel: set[int] = set()
        if not held:
            return alive, cancel
        with self._tx() as s:
            for run_id, token in held:
                rows = s.q("heartbeat", id=run_id, token=token, lease=lease)
                if rows:
                    alive.add(run_id)
                    if rows[0][0]:
                        cancel.add(run_id)
        return alive, cancel

    def finish(self, outcomes: Sequence[Outcome]) -> set[int]:
        if not outcomes:
            return set()
        with self._tx() as s:
            return self._finish(s, outcomes)

    def _finish(self, s: _Session, outcomes: Sequence[Outcome]) -> set[int]:
        """In one transaction, the outcomes whose token still holds its run, read first
        (`finish_holding`): those are the outcomes written (plain successes in one statement,
        the others one by one). (Not guessed from the rows afterwards: a rescued run, pending
        again with its token, looked like a written retry. Not a savepoint undone when the
        change count fell short either: its statement journal cost the no-op drain 10 %.)"""
        ids = json.dumps([o.id for o in outcomes])
        holding = {(row[0], row[1]) for row in s.q("finish_holding", ids=ids)}
        mine = held_outcomes(outcomes, holding)
        if mine:
            self._finish_batch(s, mine)
        if s.q("finished_parents", ids=ids):
            self._notify(s, "run")  # dependents released (after=): claim now, not at the next poll
        return {o.id for o in mine}

    def _finish_batch(self, s: _Session, outcomes: Sequence[Outcome]) -> None:
        """Write `outcomes` (each one's token holds its run)."""
        now = s.now
        plain, refused, other = by_statement(outcomes)
        self._finish_durable(s, outcomes)  # (rota.durable: last checkpoints, parks; their own statements)
        if refused:
            self._refuse(s, refused)
        if plain:
            s.q("finish_succeeded", rows=json_batch([[o.id, o.token, o.result, o.started] for o in plain]))
        if other:
            s.conn.executemany(self.queries["finish"], [_outcome_params(o, now) for o in other])

    def hand_back(self, held: Sequence[tuple[int, int]], reason: str) -> set[int]:
        back: set[int] = set()
        if not held:
            return back
        with self._tx() as s:
            for run_id, token in held:
                if s.q("hand_back", id=run_id, token=token, reason=reason):
                    back.add(run_id)
            self._notify(s, "run")
        return back

    def rescue(self, limit: int = 100) -> list[Rescued]:
        # Look before taking the write lock: every worker runs this every poll, and almost
        # always there is nothing to rescue (other processes' writers need not wait for us).
        with self._read() as s:
            if not s.q("any_expired"):
                return []
        with self._tx() as s:
            damaged = s.q("lease_damaged", limit=limit)
            rows = s.q("rescue", limit=limit)
        return rescued_rows(damaged, True) + rescued_rows(rows)

    def stats(self) -> dict[str, Any]:
        return {**run_stats(self.run_counts()), "database": f"sqlite:///{self.path}"}


def _refused(path: str) -> str:
    """Why a path whose mode allows this user to write is still read-only, if it is."""
    st = os.stat(path)
    if os.geteuid() != 0 and not (st.st_uid == os.geteuid() and st.st_mode & stat.S_IWUSR):
        return ""  # the mode says why
    return "; its mode allows writing: is it immutable (lsattr) or on a read-only mount?"


def _claimed(rows: list[Any]) -> list[Claimed]:
    """Claimed runs in id order, each decoded on its own (a damaged one is set aside: see
    records.claimed_rows); times are Unix seconds in SQLite."""
    return claimed_rows(rows, claim_of_unix)


def _outcome_params(o: Outcome, now: float) -> dict[str, Any]:
    return {
        "id": o.id,
        "token": o.token,
        "status": o.status,
        "result": o.result,
        "error": o.error,
        "retry_in": o.retry_in,
        "history": o.history,
        "started": o.started,
        "now": now,
    }


__all__ = ["NOTIFY_CHANNEL", "SQLiteStore", "sqlite_path"]
