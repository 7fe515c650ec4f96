"""What the SQL stores share: the orchestration of named queries into atomic operations.

A backend supplies connections and transactions (`_tx`, `_read`), how values travel (times,
lists, booleans) and the few statements whose shape differs (claim, batch writes); the
logic of schedules, triggers, cancellation and inspection lives here once.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ... import quarantine
from ...errors import DatabaseError
from ...models import RUNNING, LockInfo, QueueInfo, Run, WorkerInfo
from ...serialization import simple_error
from ..base import (
    NewRun,
    PollState,
    RunCounts,
    RunFilter,
    run_stats,
)
from .base import NOTIFY_CHANNEL, Row, Session, SqlBase, _plain
from .durable import SqlDurable
from .enqueue import gate_steps, insert_one
from .flow import SqlFlow
from .registry_rows import lock_from_row, worker_from_row
from .steps import AsyncSession, InsertSteps, drive, drive_async


class SqlStore(SqlDurable, SqlFlow):
    """Enqueue, inspection and control of runs, workers, named locks and retention; schedules
    come from SqlSchedules, row decoding from SqlRows, the backend hooks from SqlBase."""

    # -- enqueue -------------------------------------------------------------------------
    @abc.abstractmethod
    def _insert_plain(self, s: Session, runs: Sequence[NewRun]) -> list[int]:
        """Insert runs without keys, schedules or special status, fast; ids in input order."""

    def insert_runs(self, runs: Sequence[NewRun], *, notify: bool = True) -> list[tuple[int, bool]]:
        if not runs:
            return []
        with self._tx() as s:
            if runs[0].retry_of is not None:  # App.retry: ordered with retry_many's batches
                s.q("retry_lock")
            self._gate(s, runs)
            if _plain(runs):
                results = [(run_id, True) for run_id in self._insert_plain(s, runs)]
            else:
                results = drive(s, self._insert_steps(runs))
            self._store_traces(s, runs, results)
            due = self._wake_due(runs, results) if notify else None
            if due is not None:
                self._notify_run(s, *due)
            return results

    def _store_traces(self, s: Session, runs: Sequence[NewRun], results: list[tuple[int, bool]]) -> None:
        """The enqueue's trace context (rota.tracing), for the runs made here: one UPDATE
        per traced run, none for a run enqueued outside a span."""
        for r, (run_id, created) in zip(runs, results, strict=True):
            if r.traceparent is not None and created:
                s.q("set_traceparent", id=run_id, traceparent=r.traceparent)

    def run_traceparent(self, run_id: int) -> str | None:
        with self._read() as s:
            rows = s.q("run_traceparent", id=run_id)
        return str(rows[0][0]) if rows and rows[0][0] is not None else None

    # Whether `_insert_plain` may run in a caller's transaction (it must not where it reads
    # the next ids before inserting without holding the write lock: SQLite).
    bulk_in_foreign_tx = False

    def insert_runs_in(self, s: Session, runs: Sequence[NewRun]) -> list[tuple[int, bool]]:
        # The NOTIFY is sent in the caller's transaction (delivered at its commit), not
        # through the rate limiter, whose trailing NOTIFY could come before that commit.
        if not runs:
            return []
        self._gate(s, runs)
        if self.bulk_in_foreign_tx and _plain(runs):
            results = [(run_id, True) for run_id in self._insert_plain(s, runs)]
        else:
            results = drive(s, self._insert_steps(runs))
        self._store_traces(s, runs, results)
        due = self._wake_due(runs, results)
        if due is not None:
            query, params = self._notice(due)
            s.q(query, **params)
        return results

    async def insert_runs_in_async(self, s: AsyncSession, runs: Sequence[NewRun]) -> list[tuple[int, bool]]:
        if not runs:
            return []
        if any(not r.flow_known for r in runs) and (
            self._specs_table or self._specs_stored(await s.q("flow_specs_table"))
        ):
            await drive_async(s, gate_steps(self.flow_stamp, runs))
        results = await drive_async(s, self._insert_steps(runs))
        for r, (run_id, created) in zip(runs, results, strict=True):  # as _store_traces
            if r.traceparent is not None and created:
                await s.q("set_traceparent", id=run_id, traceparent=r.traceparent)
        due = self._wake_due(runs, results)
        if due is not None:
            query, params = self._notice(due)
            await s.q(query, **params)
        return results

    def _insert_steps(self, runs: Sequence[NewRun]) -> InsertSteps:
        """Insert runs one statement (or a few) each, as (query, params) steps that a sync or
        an async session executes (`drive`, `drive_async`): one logic for every kind of
        connection. Keys, uniqueness windows and dependencies: see `enqueue.insert_one`."""
        results: list[tuple[int, bool]] = []
        for r in runs:
            results.append((yield from insert_one(self._run_params, r)))
        return results

    # -- inspection and control ----------------------------------------------------------
    def handler_outcome(self, run_id: int) -> tuple[str, int | None] | None:
        rows = self._one("handler_outcome", id=run_id)  # (PostgreSQL: waits for the row's lock)
        return (str(rows[0][0]), rows[0][1]) if rows else None

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

    def web_rows(self, query: str, params: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
        with self._read() as s:
            return [list(s.q(query, **p)) for p in params]

    def count_by_status(self) -> dict[str, int]:
        with self._read() as s:
            return {status: int(n) for status, n in s.q("count_by_status")}

    def run_links(self, run_id: int) -> tuple[list[int], list[int]]:
        with self._read() as s:
            parents = [int(r[0]) for r in s.q("run_parents", id=run_id)]
            return parents, [int(r[0]) for r in s.q("run_dependents", id=run_id)]

    def parent_results(self, run_id: int) -> dict[int, str | None]:
        with self._read() as s:
            return {int(r[0]): r[1] for r in s.q("parent_results", id=run_id)}

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

    def cancel_requests(self, owner: str) -> set[int]:
        """The runs `owner` holds whose cancellation was requested, by any process (SQLite's
        wake-ups read them: it has no NOTIFY)."""
        with self._read() as s:
            return {int(r[0]) for r in s.q("cancel_requests", owner=owner)}

    def poll_state(self, queues: Sequence[str] | None) -> PollState:
        """The database's clock and the next due times (see Store.poll_state)."""
        with self._read() as s:
            if queues is None:
                row = s.q("poll_state")[0]
            else:
                row = s.q("poll_state_in_queues", queues=self._names(queues))[0]
        now = self._dt(row[0])
        assert now is not None
        return PollState(now, self._due_time(row[1]), self._due_time(row[2]))

    def fence(self, held: Sequence[tuple[int, int]], lease: float, worker: str, at_once: bool = False) -> set[int]:
        """A stopping worker's last write (see Store.fence): shorten these runs' leases to
        `lease` seconds and note why, for the rescue's history entry."""
        fenced: set[int] = set()
        with self._tx() as s:
            for run_id, token in held:
                error = json.dumps({
                    "type": "WorkerStopped", "token": token, "at_once": at_once, "traceback": None,
                    "message": f"worker {worker} stopped while the handler still ran; its process ends before "
                               f"this lease does, then the run is taken back as a lost worker's",
                })  # fmt: skip
                if s.q("fence", id=run_id, token=token, lease=lease, error=error):
                    fenced.add(run_id)
        return fenced

    # -- workers -------------------------------------------------------------------------
    def register_worker(
        self,
        worker_id: str,
        host: str,
        pid: int,
        concurrency: int,
        queues: Sequence[str] | None,
        lease: float | None = None,
    ) -> None:
        row = {"id": worker_id, "host": host, "pid": pid, "concurrency": concurrency,
               "queues": json.dumps(list(queues)) if queues is not None else None}  # fmt: skip
        try:
            self._one("register_worker", **row, lease=lease)
        except DatabaseError as exc:
            if not _no_lease_column(exc):
                raise
            # a schema before version 20 (an upgrade under way): judged by the viewer's lease
            self._one("register_worker_before_20", **row)

    def worker_seen(self, worker_id: str, state: str, stuck: int = 0) -> None:
        self._one("worker_seen_stuck", id=worker_id, state=state, stuck=stuck)

    def database_started(self) -> datetime | None:
        with self._read() as s:
            return self._dt(s.q("database_started")[0][0])

    def list_workers(self, stale_after: float) -> list[WorkerInfo]:
        with self._read() as s:
            rows = s.q("list_workers", stale_after=stale_after)
            stuck: dict[str, Any] = {r[0]: r[1] for r in s.q("workers_stuck")}
        return [worker_from_row(self._dt, r, stuck.get(r[0])) for r in rows]

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
        return [lock_from_row(self._dt, r) for r in rows]

    # -- paused queues and declared tasks (0021) ---------------------------------------------
    def set_queue_paused(self, queue: str, paused: bool, by: str | None = None) -> None:
        with self._tx() as s:
            if paused:
                s.q("queue_pause", queue=queue, by=by)
            else:
                s.q("queue_resume", queue=queue)

    def list_queues(self) -> list[QueueInfo]:
        with self._read() as s:
            counts = {str(r[0]): (int(r[1] or 0), int(r[2] or 0)) for r in s.q("queue_counts")}
            pauses = {str(r[0]): (self._pause_time(str(r[0]), r[1]), r[2]) for r in s.q("queue_pauses")}
        return [
            QueueInfo(name, name in pauses, *counts.get(name, (0, 0)), *pauses.get(name, (None, None)))
            for name in sorted(counts.keys() | pauses.keys())
        ]

    def _pause_time(self, queue: str, value: Any) -> datetime | None:
        """When a queue was paused; a damaged time (past year 9999, infinity) reads as None and
        is named once: the queue stays paused and every listing answers."""
        try:
            return self._dt(value)
        except quarantine.UNDECODABLE as exc:
            quarantine.report(
                quarantine.QUEUE_PAUSE,
                queue,
                f"paused_at {value!r} is not a time rota can read ({quarantine.describe(exc)})",
            )
            return None

    def set_schedule_notify_on(self, name: str, notify_on: str | None) -> None:
        with self._tx() as s:
            s.q("schedule_set_notify_on", name=name, notify_on=notify_on)

    def stored_notify_on(self) -> list[tuple[str, Any]]:
        with self._read() as s:
            return [(str(r[0]), r[1]) for r in s.q("schedules_notify_on")]

    def declare_tasks(self, tasks: Sequence[str]) -> None:
        with self._tx() as s:
            for task in sorted(tasks):
                s.q("tasks_declare", task=task)

    def declared_tasks(self) -> list[str]:
        with self._read() as s:
            return [str(r[0]) for r in s.q("tasks_declared")]

    # -- dashboard sign-outs -------------------------------------------------------------
    def signout_add(self, nonce: str, expires_at: int, at: float) -> None:
        with self._tx() as s:
            s.q("signout_prune", at=at)
            s.q("signout_add", nonce=nonce, expires_at=expires_at)

    def signed_out(self, nonce: str, at: float) -> bool:
        with self._read() as s:
            return bool(s.q("signed_out", nonce=nonce, at=at))

    # -- retention -----------------------------------------------------------------------
    def prune_from(self, status: str, older_than: float, limit: int, after: float) -> tuple[int, float]:
        with self._tx() as s:
            rows = s.q("prune", status=status, older_than=older_than, limit=limit, after=after)
            self.forget_durable(s, [int(r[0]) for r in rows])
        # a microsecond back: the cursor must not pass a run finished at the same time
        return len(rows), max((float(r[1]) - 1e-6 for r in rows), default=after)

    def run_counts(self) -> RunCounts:
        """Exact counts from a trigger-kept table (SQLite); PostgreSQL overrides this."""
        with self._read() as s:
            return RunCounts({status: int(n) for status, n in s.q("run_counts")}, frozenset())

    def stats(self) -> dict[str, Any]:
        return run_stats(self.run_counts())


__all__ = ["NOTIFY_CHANNEL", "Row", "Session", "SqlBase", "SqlStore"]


def _no_lease_column(exc: Exception) -> bool:
    """Whether registering failed for want of the workers' lease column (schema before 20)."""
    text = f"{exc} {exc.__cause__}".lower()
    return "lease" in text and "column" in text
