"""What the SQL stores share: the orchestration of named queries into atomic operations.

A backend supplies connections and transactions (`_tx`, `_read`), how values travel (times,
lists, booleans) and the few statements whose shape differs (claim, batch writes); the
logic of schedules, triggers, cancellation and inspection lives here once.
"""

from __future__ import annotations

import abc
import json
import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from ..errors import ConfigurationError, DatabaseError, PermissionDenied, ScheduleNotFound, TriggerRefused
from ..models import PENDING, RUNNING, LockInfo, Run, ScheduleInfo, WorkerInfo
from ..serialization import simple_error
from ._steps import AsyncSession, InsertSteps, drive, drive_async
from .base import (
    DueSchedule,
    Materialization,
    NewRun,
    RunCounts,
    RunFilter,
    ScheduleDef,
    Store,
    run_stats,
)

Row = tuple[Any, ...]
NOTIFY_CHANNEL = "rota"
# A new run due within this many seconds wakes idle workers; later ones are found by the
# workers' regular poll, which also tells them when the next run is due.
NOTIFY_HORIZON = 2.0


class Session(Protocol):
    """One connection inside one transaction (or one autocommit statement)."""

    def q(self, name: str, /, **params: Any) -> list[Row]: ...

    def q_text(self, sql: str, /, **params: Any) -> list[Row]: ...


def _plain(runs: Sequence[NewRun]) -> bool:
    """No keys, schedules or special status: the bulk insert path applies."""
    return all(
        r.key is None and r.schedule is None and r.retry_of is None and r.status == PENDING and not r.held for r in runs
    )


# The write probe: (table, what it checks, query); see `check_writable`.
_TABLES = (("rota_runs", "run"), ("rota_schedules", "schedule"), ("rota_workers", "worker"), ("rota_locks", "lock"))
_PROBES = (
    *((table, op.upper(), f"probe_{op}_{kind}") for table, kind in _TABLES for op in ("insert", "update", "delete")),
    ("the run id sequence", "USAGE", "probe_sequences"),
)


class _Abort(Exception):
    """Roll the transaction back without an error (a compare-and-set lost)."""


class SqlStore(Store, abc.ABC):
    queries: dict[str, str]

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
        clauses, params = [], {}
        for column in ("status", "task", "schedule", "queue"):
            value = getattr(flt, column)
            if value is not None:
                clauses.append(f"{column} = {self._p(column)}")
                params[column] = value
        if flt.before_id is not None:
            clauses.append(f"id < {self._p('before_id')}")
            params["before_id"] = flt.before_id
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        params["limit"] = flt.limit
        return f"{where} ORDER BY id DESC LIMIT {self._p('limit')}", params

    def now(self) -> datetime:
        if self.clock is not None:
            return self.clock.now()
        with self._read() as s:
            value = self._dt(s.q("now")[0][0])
        assert value is not None
        return value

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
        }

    def _due_soon(self, runs: Sequence[NewRun]) -> bool:
        horizon = datetime.now().astimezone() + timedelta(seconds=NOTIFY_HORIZON)
        if self.clock is not None:
            horizon = self.clock.now() + timedelta(seconds=NOTIFY_HORIZON)
        return any(
            r.status == PENDING
            and not r.held
            and (r.delay <= NOTIFY_HORIZON if r.scheduled_for is None else r.scheduled_for <= horizon)
            for r in runs
        )

    # -- enqueue -------------------------------------------------------------------------
    @abc.abstractmethod
    def _insert_plain(self, s: Session, runs: Sequence[NewRun]) -> list[int]:
        """Insert runs without keys, schedules or special status, fast; ids in input order."""

    def insert_runs(self, runs: Sequence[NewRun], *, notify: bool = True) -> list[tuple[int, bool]]:
        if not runs:
            return []
        with self._tx() as s:
            if _plain(runs):
                results = [(run_id, True) for run_id in self._insert_plain(s, runs)]
            else:
                results = drive(s, self._insert_steps(runs))
            if notify and self._wakes(runs, results):
                self._notify(s, "run")
            return results

    # Whether `_insert_plain` may run in a caller's transaction (it must not where it reads
    # the next ids before inserting without holding the write lock: SQLite).
    bulk_in_foreign_tx = False

    def insert_runs_in(self, s: Session, runs: Sequence[NewRun]) -> list[tuple[int, bool]]:
        # The NOTIFY is sent in the caller's transaction (delivered at its commit), not
        # through the rate limiter, whose trailing NOTIFY could come before that commit.
        if not runs:
            return []
        if self.bulk_in_foreign_tx and _plain(runs):
            results = [(run_id, True) for run_id in self._insert_plain(s, runs)]
        else:
            results = drive(s, self._insert_steps(runs))
        if self._wakes(runs, results):
            s.q("notify", channel=NOTIFY_CHANNEL, payload="run")
        return results

    async def insert_runs_in_async(self, s: AsyncSession, runs: Sequence[NewRun]) -> list[tuple[int, bool]]:
        if not runs:
            return []
        results = await drive_async(s, self._insert_steps(runs))
        if self._wakes(runs, results):
            await s.q("notify", channel=NOTIFY_CHANNEL, payload="run")
        return results

    def _wakes(self, runs: Sequence[NewRun], results: Sequence[tuple[int, bool]]) -> bool:
        return any(created for _, created in results) and self._due_soon(runs)

    def _insert_steps(self, runs: Sequence[NewRun]) -> InsertSteps:
        """Insert runs one statement each, as (query, params) steps that a sync or an async
        session executes (`drive`, `drive_async`): one logic for every kind of connection.
        A keyed run whose task has a pending or running twin is not inserted; the twin's id
        comes back with created=False. If the twin finishes between our conflicting insert
        and the lookup, insert again (each statement sees fresh data under READ COMMITTED;
        under SQLite's write lock it cannot happen)."""
        results: list[tuple[int, bool]] = []
        for r in runs:
            for _ in range(5):
                rows = yield "insert_run", self._run_params(r)
                if rows:
                    results.append((int(rows[0][0]), True))
                    break
                if r.key is None:
                    raise ConfigurationError(f"run of {r.task} conflicts with an existing run")  # pragma: no cover
                existing = yield "find_keyed", {"task": r.task, "key": r.key}
                if existing:
                    results.append((int(existing[0][0]), False))
                    break
            else:  # pragma: no cover - needs a twin finishing five times in a row
                raise ConfigurationError(
                    f"could not insert run of {r.task} with key {r.key!r}: its twins kept finishing"
                )
        return results

    # -- schedules -----------------------------------------------------------------------
    def _schedule_params(self, d: ScheduleDef, next_run_at: datetime | None) -> dict[str, Any]:
        return {
            "name": d.name,
            "task": d.task,
            "cron": d.cron,
            "every": d.every,
            "tz": d.tz,
            "args": d.args,
            "kwargs": d.kwargs,
            "overlap": d.overlap,
            "misfire": d.misfire,
            "misfire_grace": d.misfire_grace,
            "run_immediately": d.run_immediately,
            "queue": d.queue,
            "priority": d.priority,
            "max_attempts": d.max_attempts,
            "timeout": d.timeout,
            "backoff": d.backoff,
            "source": d.source,
            "app": d.app,
            "definition": d.definition,
            "next_run_at": self._ts(next_run_at),
        }

    def sync_schedules(self, app: str, defs: Sequence[ScheduleDef], first_ticks: dict[str, datetime]) -> None:
        now = self.now()
        with self._tx() as s:
            for d in defs:
                first = first_ticks[d.name]
                start = now if d.run_immediately else first
                s.q(
                    "upsert_code_schedule",
                    first_tick=self._ts(first),
                    **self._schedule_params(d, start),
                )
            removed = s.q("deactivate_code_schedules", app=app, names=self._names([d.name for d in defs]))
            error = simple_error("Removed", "its schedule was removed from code")
            for (name,) in removed:
                s.q("cancel_schedule_pending", name=name, error=error)
            self._notify(s, "schedule")

    def add_schedule(self, sdef: ScheduleDef, first_tick: datetime) -> None:
        start = self.now() if sdef.run_immediately else first_tick
        with self._tx() as s:
            if not s.q("insert_schedule", **self._schedule_params(sdef, start)):
                raise ConfigurationError(
                    f"a schedule named {sdef.name!r} already exists; use update_schedule() to "
                    "change it or remove_schedule() first"
                )
            self._notify(s, "schedule")

    def update_schedule(self, sdef: ScheduleDef, next_run_at: datetime | None) -> None:
        with self._tx() as s:
            if not s.q("update_schedule", **self._schedule_params(sdef, next_run_at)):
                raise ScheduleNotFound(f"no active schedule named {sdef.name!r}")
            self._notify(s, "schedule")

    def remove_schedule(self, name: str) -> int:
        with self._tx() as s:
            if not s.q("deactivate_schedule", name=name):
                raise ScheduleNotFound(f"no active schedule named {name!r}")
            error = simple_error("Removed", f"schedule {name!r} was removed")
            return len(s.q("cancel_schedule_pending", name=name, error=error))

    def set_paused(self, name: str, paused: bool, next_run_at: datetime | None) -> None:
        with self._tx() as s:
            if not s.q("set_paused", name=name, paused=paused, next_run_at=self._ts(next_run_at)):
                raise ScheduleNotFound(f"no active schedule named {name!r}")
            self._notify(s, "schedule")

    def due_schedules(self, limit: int) -> list[DueSchedule]:
        with self._read() as s:
            rows = s.q("due_schedules", limit=limit)
        return [self._due_from_row(r) for r in rows]

    def _due_from_row(self, r: Row) -> DueSchedule:
        next_run_at = self._dt(r[15])
        assert next_run_at is not None
        return DueSchedule(
            name=r[0],
            task=r[1],
            cron=r[2],
            every=r[3],
            tz=r[4],
            args=r[5],
            kwargs=r[6],
            overlap=r[7],
            misfire=r[8],
            misfire_grace=r[9],
            queue=r[10],
            priority=r[11],
            max_attempts=r[12],
            timeout=r[13],
            backoff=r[14],
            next_run_at=next_run_at,
        )

    def _tick_run(self, due: DueSchedule, tick: datetime | None, **extra: Any) -> NewRun:
        return NewRun(
            task=due.task,
            args=due.args,
            kwargs=due.kwargs,
            queue=due.queue,
            priority=due.priority,
            scheduled_for=tick,
            max_attempts=due.max_attempts,
            timeout=due.timeout,
            backoff=due.backoff,
            schedule=due.name,
            tick=tick,
            exclusive=due.overlap != "concurrent",
            **extra,
        )

    def materialize(self, due: DueSchedule, plan: Materialization) -> bool:
        try:
            with self._tx() as s:
                self._materialize(s, due, plan)
        except _Abort:
            return False
        return True

    def _bound_tick_locks(self, s: Session) -> None:
        """Let a tick's transaction give up quickly on a row another session holds (a host
        frozen mid-tick): the worker moves on to its other schedules. A no-op where writers
        take the whole database (SQLite)."""

    def _materialize(self, s: Session, due: DueSchedule, plan: Materialization) -> None:
        self._bound_tick_locks(s)
        woke = False
        for tick in plan.run:
            if s.q("insert_run", **self._run_params(self._tick_run(due, tick))):
                woke = True
                continue
            if s.q("tick_exists", schedule=due.name, tick=self._ts(tick)):
                raise _Abort  # another instance materialized this tick
            woke = self._overlap(s, due, tick, manual=False)[1] or woke
        for tick, reason in plan.skipped:
            skipped = self._tick_run(due, tick, status="skipped", error=simple_error("Misfire", reason))
            s.q("insert_run", **self._run_params(skipped))
        if not s.q(
            "advance_schedule",
            name=due.name,
            old=self._ts(due.next_run_at),
            new=self._ts(plan.next_run_at),
            skipped_more=plan.skipped_more,
        ):
            raise _Abort
        if due.overlap != "concurrent" and s.q("promote_held", schedule=due.name):
            # Holding the schedule's row lock now: an active run that ended while we were
            # inserting held ticks could not see them; we handed its slot on ourselves.
            woke = True
        if woke:
            self._notify(s, "run")

    def _overlap(
        self, s: Session, due: DueSchedule, tick: datetime | None, *, manual: bool, **extra: Any
    ) -> tuple[int | None, bool]:
        """A tick met the active run of its exclusive schedule: apply the overlap policy.
        Returns (id of the run inserted for the tick or None, whether it may start now)."""
        active = s.q("active_run", schedule=due.name)
        active_id, active_status = (int(active[0][0]), active[0][1]) if active else (None, None)
        when = "a manual trigger" if tick is None else f"the tick at {_iso(tick)}"
        if due.overlap == "skip":
            if manual:
                raise TriggerRefused(
                    f"schedule {due.name!r} has run {active_id} {active_status}; its overlap "
                    "policy 'skip' allows one at a time. Wait for it, cancel it, or use "
                    "overlap='queue' or 'replace'"
                )
            reason = f"run {active_id} was still {active_status} (overlap=skip)"
            skipped = self._tick_run(due, tick, status="skipped", error=simple_error("Overlap", reason))
            s.q("insert_run", **self._run_params(skipped))
            return None, False
        if due.overlap == "replace":
            error = simple_error("Replaced", f"replaced by {when} (overlap=replace)")
            s.q("cancel_held", schedule=due.name, error=error)
            if active_id is not None and active_status == PENDING:
                s.q("cancel_active_pending", id=active_id, error=error)
                rows = s.q("insert_run", **self._run_params(self._tick_run(due, tick, **extra)))
                if rows:
                    return int(rows[0][0]), True
            elif active_id is not None:
                s.q("request_cancel", id=active_id)
                self._notify(s, f"cancel:{active_id}")
        rows = s.q("insert_run", **self._run_params(self._tick_run(due, tick, held=True, **extra)))
        return int(rows[0][0]), False

    def trigger(self, due: DueSchedule, *, key: str | None = None, retry_of: int | None = None) -> tuple[int, str]:
        extra = {"key": key, "retry_of": retry_of}
        with self._tx() as s:
            rows = s.q("insert_run", **self._run_params(self._tick_run(due, None, **extra)))
            if rows:
                run_id, started = int(rows[0][0]), True
            else:
                maybe_id, started = self._overlap(s, due, None, manual=True, **extra)
                assert maybe_id is not None
                run_id = maybe_id
                # As in materialize: an active run that ended while we inserted a held run
                # could not see it. Take the schedule's row lock (after the inserts, the
                # order materialize uses: no deadlock with the ending run's trigger), then
                # hand the slot on ourselves if it is free.
                s.q("lock_schedule", schedule=due.name)
                promoted = s.q("promote_held", schedule=due.name)
                started = started or any(int(r[0]) == run_id for r in promoted)
                if promoted and not started:
                    self._notify(s, "run")  # an older held run got the slot
            if started:
                self._notify(s, "run")
                return run_id, "started"
            return run_id, "replacing" if due.overlap == "replace" else "queued"

    def retry_source(self, run_id: int) -> tuple[str | None, str | None] | None:
        with self._read() as s:
            rows = s.q("retry_source", id=run_id)
        return (rows[0][0], rows[0][1]) if rows else None

    def mark_plan_error(self, due: DueSchedule, error: str) -> bool:
        return bool(self._one("mark_plan_error", name=due.name, old=self._ts(due.next_run_at), error=error))

    def get_schedule(self, name: str) -> ScheduleInfo | None:
        rows = self._select("schedule_columns", f" WHERE name = {self._p('name')}", name=name)
        return self._schedule_from_row(rows[0]) if rows else None

    def get_schedule_def(self, name: str) -> ScheduleDef | None:
        rows = self._select("schedule_columns", f" WHERE name = {self._p('name')}", name=name)
        if not rows:
            return None
        r = rows[0]
        return ScheduleDef(
            name=r[0],
            task=r[1],
            cron=r[2],
            every=r[3],
            tz=r[4],
            args=r[5],
            kwargs=r[6],
            overlap=r[7],
            misfire=r[8],
            misfire_grace=r[9],
            run_immediately=bool(r[24]),
            queue=r[10],
            priority=r[11],
            max_attempts=r[12],
            timeout=r[13],
            backoff=r[25],
            source=r[14],
            app=r[26],
            definition=r[27],
        )

    def list_schedules(self, include_inactive: bool = False) -> list[ScheduleInfo]:
        suffix = "" if include_inactive else " WHERE active"
        rows = self._select("schedule_columns", suffix + " ORDER BY name")
        return [self._schedule_from_row(r) for r in rows]

    def _schedule_from_row(self, r: Row) -> ScheduleInfo:
        return ScheduleInfo(
            name=r[0],
            task=r[1],
            cron=r[2],
            every=timedelta(seconds=r[3]) if r[3] is not None else None,
            tz=r[4],
            args=_loads(r[5], [], "args", []),
            kwargs=_loads(r[6], {}, "kwargs", []),
            overlap=r[7],
            misfire=r[8],
            misfire_grace=timedelta(seconds=r[9]),
            queue=r[10],
            priority=r[11],
            max_attempts=r[12],
            timeout=r[13],
            source=r[14],
            active=bool(r[15]),
            paused=bool(r[16]),
            next_run_at=self._dt(r[17]),
            last_run_at=self._dt(r[18]),
            last_status=r[19],
            run_count=r[20],
            success_count=r[21],
            failure_count=r[22],
            skip_count=r[23],
            plan_error=r[28],
        )

    # -- inspection and control ----------------------------------------------------------
    def _run_from_row(self, r: Row) -> Run:
        """One decoding path for every run read: a field that does not decode (JSON that is not
        valid, a time past year 9999) is named in `Run.corrupt` and read as empty, so that one
        bad row does not break every listing."""
        corrupt: list[str] = []

        def when(i: int, field: str) -> datetime | None:
            try:
                return self._dt(r[i])
            except (ValueError, OverflowError, OSError, TypeError):
                corrupt.append(field)
                return datetime.max.replace(tzinfo=UTC)

        def required(i: int, field: str) -> datetime:
            return when(i, field) or datetime.max.replace(tzinfo=UTC)

        return Run(
            id=str(r[0]),
            task=r[1],
            status=r[2],
            queue=r[3],
            priority=r[4],
            args=_loads(r[5], [], "args", corrupt),
            kwargs=_loads(r[6], {}, "kwargs", corrupt),
            key=r[7],
            schedule=r[8],
            scheduled_for=required(9, "scheduled_for"),
            due_at=required(10, "due_at"),
            attempt=r[11],
            max_attempts=r[12],
            timeout=r[13],
            worker=r[14],
            token=r[15],
            lease_until=when(16, "lease_until"),
            cancel_requested=bool(r[17]),
            created_at=required(18, "created_at"),
            started_at=when(19, "started_at"),
            finished_at=when(20, "finished_at"),
            result=_loads(r[21], None, "result", corrupt),
            error=_loads(r[22], None, "error", corrupt),
            history=_loads(r[23] or "[]", [], "attempts", corrupt),
            retry_of=str(r[24]) if r[24] is not None else None,
            held=bool(r[25]),
            corrupt=tuple(corrupt),
        )

    def get_run(self, run_id: int) -> Run | None:
        rows = self._select("run_columns", f" WHERE id = {self._p('id')}", id=run_id)
        return self._run_from_row(rows[0]) if rows else None

    def list_runs(self, flt: RunFilter) -> list[Run]:
        suffix, params = self._runs_where(flt)
        return [self._run_from_row(r) for r in self._select("run_columns", suffix, **params)]

    def run_rows(self, query: str, flt: RunFilter | None = None, run_id: int | None = None, **params: Any) -> list[Row]:
        if run_id is not None:
            return self._select(query, f" WHERE id = {self._p('id')}", id=run_id, **params)
        suffix, where = self._runs_where(flt or RunFilter())
        return self._select(query, suffix, **where, **params)

    def count_by_status(self) -> dict[str, int]:
        with self._read() as s:
            return {status: int(n) for status, n in s.q("count_by_status")}

    def cancel(self, run_id: int, reason: str) -> str | None:
        error = simple_error("Cancelled", reason)
        with self._tx() as s:
            if s.q("cancel_pending", id=run_id, error=error):
                return "cancelled"
            if s.q("request_cancel", id=run_id):
                self._notify(s, f"cancel:{run_id}")
                return RUNNING
            rows = s.q("run_status", id=run_id)
            return str(rows[0][0]) if rows else None

    # -- workers -------------------------------------------------------------------------
    def register_worker(
        self, worker_id: str, host: str, pid: int, concurrency: int, queues: Sequence[str] | None
    ) -> None:
        self._one(
            "register_worker",
            id=worker_id,
            host=host,
            pid=pid,
            concurrency=concurrency,
            queues=json.dumps(list(queues)) if queues is not None else None,
        )

    def worker_seen(self, worker_id: str, state: str, stuck: int = 0) -> None:
        self._one("worker_seen_stuck", id=worker_id, state=state, stuck=stuck)

    def database_started(self) -> datetime | None:
        with self._read() as s:
            return self._dt(s.q("database_started")[0][0])

    def list_workers(self, stale_after: float) -> list[WorkerInfo]:
        with self._read() as s:
            rows = s.q("list_workers", stale_after=stale_after)
            stuck: dict[str, int] = {r[0]: r[1] for r in s.q("workers_stuck")}
        result = []
        for r in rows:
            started, seen = self._dt(r[6]), self._dt(r[7])
            assert started is not None and seen is not None
            result.append(
                WorkerInfo(
                    id=r[0],
                    host=r[1],
                    pid=r[2],
                    concurrency=r[3],
                    queues=json.loads(r[4]) if r[4] else None,
                    state=r[5],
                    started_at=started,
                    last_seen=seen,
                    alive=bool(r[8]),
                    stuck=int(stuck.get(r[0], 0)),
                )
            )
        return result

    def prune_workers(self, lost_after: float, older_than: float) -> int:
        with self._tx() as s:
            s.q("mark_lost_workers", lost_after=lost_after)
            return len(s.q("prune_workers", older_than=older_than))

    # -- named locks ---------------------------------------------------------------------
    def lock_acquire(self, name: str, owner: str, ttl: float) -> int | None:
        rows = self._one("lock_acquire", name=name, owner=owner, ttl=ttl)
        return int(rows[0][0]) if rows else None

    def lock_renew(self, name: str, owner: str, token: int, ttl: float) -> bool:
        return bool(self._one("lock_renew", name=name, owner=owner, token=token, ttl=ttl))

    def lock_release(self, name: str, owner: str, token: int) -> bool:
        return bool(self._one("lock_release", name=name, owner=owner, token=token))

    def list_locks(self) -> list[LockInfo]:
        with self._read() as s:
            rows = s.q("list_locks")
        return [
            LockInfo(
                name=r[0],
                owner=r[1],
                token=int(r[2]),
                acquired_at=self._dt(r[3]),
                expires_at=self._dt(r[4]),
                held=bool(r[5]),
            )
            for r in rows
        ]

    # -- retention -----------------------------------------------------------------------
    def prune(self, status: str, older_than: float, limit: int) -> int:
        return len(self._one("prune", status=status, older_than=older_than, limit=limit))

    def run_counts(self) -> RunCounts:
        """Exact counts from a trigger-kept table (SQLite); PostgreSQL overrides this."""
        with self._read() as s:
            return RunCounts({status: int(n) for status, n in s.q("run_counts")}, frozenset())

    def stats(self) -> dict[str, Any]:
        return run_stats(self.run_counts())


def _missing_privileges(rows: Sequence[Row]) -> str:
    role, schema = rows[0][0], rows[0][1]
    missing = ", ".join(f"{priv} on {obj}" for _, _, obj, priv in rows)
    return (
        f"database role {role!r} lacks {missing} (schema {schema!r}): a worker needs SELECT, INSERT, "
        "UPDATE and DELETE on every rota table and USAGE on its sequences. Grant them, e.g. "
        f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"; '
        f'GRANT USAGE ON ALL SEQUENCES IN SCHEMA "{schema}" TO "{role}"'
    )


def _loads(text: str | None, fallback: Any, field: str, corrupt: list[str]) -> Any:
    """Decode a stored JSON field; a damaged one reads as `fallback` and is named in `corrupt`
    (one bad row must not break every listing)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        corrupt.append(field)
        return fallback


def _iso(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")
