"""The base of the SQL stores: sessions, what a backend supplies (transactions, value
conversions), the permission probe and small shared helpers (rota.stores.sqlstore.store builds on it)."""

from __future__ import annotations

import abc
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from ...errors import DatabaseError, DatabaseTransient, PermissionDenied
from ...models import PENDING
from ..base import (
    NewRun,
    RunFilter,
    Store,
)
from ..records import DAMAGED_ERROR_LIKE
from .enqueue import gate_steps
from .steps import drive

Row = tuple[Any, ...]
NOTIFY_CHANNEL = "rota"
UNHAPPY = frozenset({"failed", "cancelled", "skipped"})
# the predicate of SQLite's rota_runs_unhappy_* indexes (migration 0013)
UNHAPPY_TERM = "(status = 'failed' OR status = 'cancelled' OR status = 'skipped')"
# When new runs are due: (the earliest scheduled_for given, the smallest delay from now).
Due = tuple[datetime | None, float | None]


class Session(Protocol):
    """One connection inside one transaction (or one autocommit statement)."""

    def q(self, name: str, /, **params: Any) -> list[Row]: ...

    def q_text(self, sql: str, /, **params: Any) -> list[Row]: ...


def _plain(runs: Sequence[NewRun]) -> bool:
    """No keys, schedules, parents or special status: the bulk insert path applies. A limit
    or a rate is four more columns of it (resolved before, by `_gate`)."""
    return all(
        r.key is None
        and r.schedule is None
        and r.retry_of is None
        and r.status == PENDING
        and not r.held
        and not r.after
        for r in runs
    )


# The write probe: (table, what it checks, query); see `check_writable`.
_TABLES = (("rota_runs", "run"), ("rota_schedules", "schedule"), ("rota_workers", "worker"), ("rota_locks", "lock"))
_PROBES = (
    *((table, op.upper(), f"probe_{op}_{kind}") for table, kind in _TABLES for op in ("insert", "update", "delete")),
    ("the run id sequence", "USAGE", "probe_sequences"),
)


class _Abort(Exception):
    """Roll the transaction back without an error (a compare-and-set lost)."""


class SqlBase(Store, abc.ABC):
    """What a backend supplies, the permission probe, and helpers every part uses."""

    queries: dict[str, str]
    flow_stamp: Callable[[NewRun], None] | None = None  # sets a run's limit and rate (rota.limits)
    flow_resolve: Callable[[], int] | None = None  # keys runs waiting unresolved (rota.limit_specs)

    # -- what a backend supplies ----------------------------------------------------------
    @abc.abstractmethod
    def _tx(self) -> AbstractContextManager[Session]:
        """A write transaction (serialized with other writers where the backend needs it)."""

    @abc.abstractmethod
    def _read(self) -> AbstractContextManager[Session]:
        """A read-only session."""

    @abc.abstractmethod
    def _ts(self, value: datetime | None) -> Any:
        """A datetime as a query parameter."""

    @abc.abstractmethod
    def _dt(self, value: Any) -> datetime | None:
        """A time column as an aware UTC datetime."""

    @abc.abstractmethod
    def _names(self, values: Sequence[str] | None) -> Any:
        """A list of strings as one query parameter (None stays None)."""

    @abc.abstractmethod
    def _notify(self, s: Session, payload: str) -> None:
        """Wake idle workers (at commit)."""

    # -- the permission probe -------------------------------------------------------------
    def check_writable(self) -> None:
        missing = self._select("probe_privileges")
        if missing:
            raise PermissionDenied(_missing_privileges(missing))
        probe = f"rota.permission-probe.{uuid.uuid4().hex}"
        step = ("", "", "")
        try:
            with self._tx() as s:
                for step in _PROBES:
                    s.q(step[2], probe=probe)
                raise _Abort  # roll everything back
        except _Abort:
            return
        except DatabaseError as exc:
            if isinstance(exc, DatabaseTransient) and not _read_only(exc):
                raise  # a cut connection or a lock timeout says nothing about privileges
            table, op, _ = step
            raise PermissionDenied(f"cannot {op} {table}, which rota needs: {exc}") from exc

    # -- shared helpers ------------------------------------------------------------------
    def _one(self, query: str, /, **params: Any) -> list[Row]:
        with self._tx() as s:
            return s.q(query, **params)

    @abc.abstractmethod
    def _p(self, name: str) -> str:
        """The placeholder of parameter `name` in the backend's parameter style."""

    def _select(self, query: str, suffix: str = "", /, **params: Any) -> list[Row]:
        with self._read() as s:
            return s.q_text(self.queries[query] + suffix, **params)

    def _runs_where(self, flt: RunFilter) -> tuple[str, dict[str, Any]]:
        clauses: list[str] = []
        params: dict[str, Any] = {}
        if flt.status is not None:
            clauses += self._status_terms(flt, params)
        for column in ("task", "schedule", "queue"):
            value = getattr(flt, column)
            if value is not None:
                clauses.append(f"{column} = {self._p(column)}")
                params[column] = value
        if flt.before_id is not None:
            clauses.append(f"id < {self._p('before_id')}")
            params["before_id"] = flt.before_id
        if flt.damaged:  # (with status failed: the client sets it)
            clauses.append(f"error LIKE {self._p('damaged')}")
            params["damaged"] = DAMAGED_ERROR_LIKE
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        params["limit"] = flt.limit
        return f"{where} ORDER BY id DESC LIMIT {self._p('limit')}", params

    def _status_terms(self, flt: RunFilter, params: dict[str, Any]) -> list[str]:
        """A listing's status condition (SQLite; PostgreSQL overrides). An unhappy status with
        a task or a schedule repeats the predicate of rota_runs_unhappy_task/_schedule
        (migration 0013): SQLite uses a partial index only when the query's WHERE implies the
        index's predicate. The bound status alone does since 0013 (it did not imply 0012's
        IN list); the repeated term keeps the plan from resting on the bound value."""
        params["status"] = flt.status
        terms = [f"status = {self._p('status')}"]
        if flt.status in UNHAPPY and (flt.task is not None or flt.schedule is not None):
            terms.append(UNHAPPY_TERM)
        return terms

    def now(self) -> datetime:
        if self.clock is not None:
            return self.clock.now()
        with self._read() as s:
            value = self._dt(s.q("now")[0][0])
        assert value is not None
        return value

    def _gate(self, s: Session, runs: Sequence[NewRun]) -> None:
        """Key the runs made here whose task this process does not declare (`enqueue.gate_steps`)."""
        if any(not r.flow_known for r in runs) and (self._specs_table or self._specs_stored(s.q("flow_specs_table"))):
            drive(s, gate_steps(self.flow_stamp, runs))

    _specs_table = False  # rota_task_flow exists (migration 0011): once seen, never asked again

    def _specs_stored(self, rows: list[Row]) -> bool:
        self._specs_table = bool(rows[0][0])
        return self._specs_table

    def _insert_run(self, s: Session, r: NewRun) -> list[Row]:
        """`insert_run`, or `insert_run_gated` for a run with a limit or a rate."""
        self._gate(s, [r])
        gated = r.limit_name is not None or r.rate_name is not None
        return s.q("insert_run_gated" if gated else "insert_run", **self._run_params(r))

    def _run_params(self, r: NewRun, run_id: int | None = None) -> dict[str, Any]:
        return {
            "id": run_id,
            "task": r.task,
            "queue": r.queue,
            "priority": r.priority,
            "status": r.status,
            "args": r.args,
            "kwargs": r.kwargs,
            "key": r.key,
            "schedule": r.schedule,
            "tick": self._ts(r.tick),
            "exclusive": r.exclusive,
            "held": r.held,
            "scheduled_for": self._ts(r.scheduled_for),
            "delay": r.delay,
            "max_attempts": r.max_attempts,
            "timeout": r.timeout,
            "backoff": r.backoff,
            "error": r.error,
            "retry_of": r.retry_of,
            "due_at": self._ts(r.due_at),
            "limit_name": r.limit_name,
            "limit_key": r.limit_key,
            "rate_name": r.rate_name,
            "rate_key": r.rate_key,
        }

    def _local_now(self) -> datetime:
        return self.clock.now() if self.clock is not None else datetime.now(UTC)

    def _wake_due(self, runs: Sequence[NewRun], results: Sequence[tuple[int, bool]]) -> Due | None:
        """When the new runs that may wake a worker are due; None if none was created."""
        if not any(created for _, created in results):
            return None
        ready = [r for r in runs if r.status == PENDING and not r.held]
        at = [r.due_at or r.scheduled_for for r in ready if r.scheduled_for is not None]
        delay = [r.delay for r in ready if r.scheduled_for is None]
        if not (at or delay):
            return None
        return (min(at) if at else None, min(delay) if delay else None)

    def _due_now(self, at: datetime | None, delay: float | None) -> bool:
        return (delay is not None and delay <= 0) or (at is not None and at <= self._local_now())

    def _notify_run(self, s: Session, at: datetime | None, delay: float | None = None) -> None:
        """Wake idle workers for new runs (every new run, however far ahead, so a sleeping
        worker never waits for its poll): `run` when one is due now, else `run:<epoch
        seconds>`, when the earliest is due (on this store's clock, the database's)."""
        if self._due_now(at, delay):
            self._notify(s, "run")
            return
        later = None if delay is None else self._local_now() + timedelta(seconds=delay)
        due = min(t for t in (at, later) if t is not None)
        self._notify(s, f"run:{due.timestamp():.6f}")

    def _notice(self, due: Due) -> tuple[str, dict[str, Any]]:
        """The statement that wakes workers at the commit of a caller's transaction."""
        at, delay = due
        if self._due_now(at, delay):
            return "notify", {"channel": NOTIFY_CHANNEL, "payload": "run"}
        return "notify_due", {"channel": NOTIFY_CHANNEL, "at": self._ts(at), "delay": delay}


def _read_only(exc: DatabaseTransient) -> bool:
    """A write refused because the database or the session is read-only (PostgreSQL's
    SQLSTATE 25006, SQLite's "readonly database"): transient to a running worker (a
    failover), but to the privilege probe a database rota cannot write."""
    cause = exc.__cause__
    return getattr(cause, "sqlstate", None) == "25006" or "readonly" in str(cause).lower()


def _missing_privileges(rows: Sequence[Row]) -> str:
    role, schema = rows[0][0], rows[0][1]
    missing = ", ".join(f"{priv} on {obj}" for _, _, obj, priv in rows)
    return (
        f"database role {role!r} lacks {missing} (schema {schema!r}): a worker needs SELECT, INSERT, "
        "UPDATE and DELETE on every rota table and USAGE on its sequences. Grant them, e.g. "
        f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"; '
        f'GRANT USAGE ON ALL SEQUENCES IN SCHEMA "{schema}" TO "{role}"'
    )
