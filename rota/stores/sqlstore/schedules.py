"""The schedules of the SQL stores: sync, add/update/remove, pause, due ticks turned into
runs (materialize) with their overlap policy, and manual triggers."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ... import quarantine
from ...errors import ConfigurationError, ScheduleNotFound, TriggerRefused
from ...limit_specs import warn_skipped
from ...models import PENDING, ScheduleInfo
from ...serialization import simple_error
from ...timing import TICK_ROWS, judge_unclaimed, stored
from ...timing.jitter import stored_due
from ..base import (
    DueSchedule,
    Materialization,
    NewRun,
    ScheduleDef,
)
from .base import Session, _Abort
from .rows import SqlRows, _iso


class SqlSchedules(SqlRows):
    """Schedule operations, shared by both backends."""

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
            "jitter": d.jitter,
        }

    def sync_schedules(self, app: str, defs: Sequence[ScheduleDef], first_ticks: dict[str, datetime]) -> None:
        now = self.now()
        # stored damaged (rota.quarantine): rewritten whole from the code, which is their repair
        damaged = {i.name for i in self.list_schedules() if i.damage and i.source == "code"} if defs else set()
        with self._tx() as s:
            for d in defs:
                if d.name in damaged:
                    s.q("forget_damaged_schedule", name=d.name)
                self._withdraw_ahead(s, d.name, "was redeployed with a new definition", d.definition)
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
            self._withdraw_ahead(s, sdef.name, "was updated")
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
            if paused:
                self._withdraw_ahead(s, name, "was paused")
            if not s.q("set_paused", name=name, paused=paused, next_run_at=self._ts(next_run_at)):
                raise ScheduleNotFound(f"no active schedule named {name!r}")
            self._notify(s, "schedule")

    def _withdraw_ahead(self, s: Session, name: str, why: str, definition: str | None = None) -> datetime | None:
        """Cancel the schedule's tick runs made ahead of their (future) tick, in the caller's
        transaction, and plan the earliest of those ticks again when it comes (the change
        being made may move next_run_at elsewhere; see Materialization.ahead). Returns
        that tick (None if nothing was withdrawn)."""
        error = simple_error("Withdrawn", f"schedule {name!r} {why} before this tick came")
        rows = s.q("withdraw_ahead", name=name, error=error, definition=definition)
        if not rows:
            return None
        tick = min(r[0] for r in rows)
        s.q("rewind_schedule", name=name, tick=tick)
        return self._dt(tick)

    def withdraw_ahead(self, names: Sequence[str], why: str) -> dict[str, datetime]:
        with self._tx() as s:
            ticks = {name: self._withdraw_ahead(s, name, why) for name in names}
            withdrawn = {name: tick for name, tick in ticks.items() if tick is not None}
            if withdrawn:
                self._notify(s, "schedule")  # a live worker makes the tick again
        return withdrawn

    def judge_ahead(self, limit: int = 100) -> list[tuple[str, datetime, str | None]]:
        with self._read() as s:
            stale = s.q("stale_ahead", limit=limit)
        if not stale:
            return []
        judged: list[tuple[str, datetime, str | None]] = []
        with self._tx() as s:
            now = self._dt(s.q("now")[0][0])
            assert now is not None
            for run_id, name, tick_value, misfire, grace, later_due in stale:
                try:
                    tick, why = self._judge(name, tick_value, now, misfire, grace, bool(later_due))
                except (*quarantine.UNDECODABLE, ConfigurationError) as exc:  # its schedule is damaged
                    quarantine.report(quarantine.SCHEDULE, name, quarantine.describe(exc), schedule=name)
                    continue  # the others are judged
                s.q("lock_schedule", schedule=name)  # the order finishers take: schedule, then runs
                if why is None:
                    if s.q("keep_ahead", id=run_id):
                        judged.append((name, tick, None))
                        self._notify(s, "run")
                elif s.q("misfire_ahead", id=run_id, error=simple_error("Misfire", why)):
                    judged.append((name, tick, why))
        return judged

    def _judge(
        self, name: str, tick_value: Any, now: datetime, misfire: str, grace: Any, later_due: bool
    ) -> tuple[datetime, str | None]:
        """One run made ahead, judged (see judge_ahead). A damaged grace (rota.timing.stored)
        is named and judged as 0: the run is past the deadline its grace gave when it was made."""
        tick = self._dt(tick_value)
        assert tick is not None
        damaged = stored.damage({"misfire_grace": grace})
        if damaged:
            quarantine.report(quarantine.SCHEDULE, name, damaged[0][1], schedule=name)
        grace_td = timedelta(0) if damaged else timedelta(seconds=float(grace))
        return tick, judge_unclaimed(tick, now, misfire=misfire, grace=grace_td, later_due=later_due)

    def due_schedules(self, limit: int, lead: float = 0.0) -> list[DueSchedule]:
        with self._read() as s:
            if lead > 0:
                rows = s.q("due_schedules_ahead", limit=limit, lead=lead)
            else:
                rows = s.q("due_schedules", limit=limit)
        return [self._due_from_row(r) for r in rows]

    def _tick_run(self, due: DueSchedule, tick: datetime | None, **extra: Any) -> NewRun:
        run = NewRun(
            task=due.task,
            args=due.args,
            kwargs=due.kwargs,
            queue=due.queue,
            priority=due.priority,
            scheduled_for=tick,
            due_at=_due_at(due, tick),
            max_attempts=due.max_attempts,
            timeout=due.timeout,
            backoff=due.backoff,
            schedule=due.name,
            tick=tick,
            exclusive=due.overlap != "concurrent",
            **extra,
        )
        return run  # its limit and rate: set as it is inserted (`_gate`)

    def _keyed_tick(self, s: Session, due: DueSchedule, tick: datetime) -> NewRun:
        """A due tick's run with its limit and rate keys. One whose keys its task's code
        cannot compute from the schedule's stored arguments (rota.limit_specs.stamp_lenient)
        is recorded skipped with the error (logged by materialize once committed): it
        neither runs unkeyed nor stops the ticks of the other schedules."""
        run = self._tick_run(due, tick, skip_unkeyed=True)
        self._gate(s, [run])
        return run

    def materialize(self, due: DueSchedule, plan: Materialization) -> bool:
        unkeyed: list[NewRun] = []  # the ticks recorded skipped as their keys cannot be computed
        try:
            with self._tx() as s:
                following = self._materialize(s, due, plan, unkeyed)
        except _Abort:
            return False  # rolled back: nothing was recorded, nothing is logged
        for run in unkeyed:
            warn_skipped(due.name, run.tick, run.error)
            self.unkeyed_skips.append((due.name, run.tick, run.error))  # the ticker sends run_skipped
        if following != plan.next_run_at:  # committed without the tick made ahead
            plan.ahead = None
        return True

    def _bound_tick_locks(self, s: Session) -> None:
        """Let a tick's transaction give up quickly on a row another session holds (a host
        frozen mid-tick): the worker moves on to its other schedules. A no-op where writers
        take the whole database (SQLite)."""

    def _take_tick(self, s: Session, due: DueSchedule) -> None:
        """The tick pass's first step: raise _Abort if another instance is making or made
        this tick (MySQL: the schedule's row, locked without waiting). Elsewhere a no-op:
        the writes that follow find out (PostgreSQL's insert of a tick being made waits for
        the other's commit and locks nothing; SQLite's writers take the whole database)."""

    def _materialize(self, s: Session, due: DueSchedule, plan: Materialization, unkeyed: list[NewRun]) -> datetime:
        """Write the plan; returns the next_run_at written (plan.ahead if that was refused).
        The ticks inserted skipped as they cannot be keyed are added to `unkeyed`."""
        self._bound_tick_locks(s)
        self._take_tick(s, due)
        soonest: datetime | None = None
        # Skipped rows per catch-up: at most TICK_ROWS, the misfire's and the overlap's
        # together (the on-time ticks that find the first one active); the rest are counted.
        room, counted = TICK_ROWS - len(plan.skipped), 0
        for tick in plan.run:
            run = self._keyed_tick(s, due, tick)
            if self._insert_run(s, run):
                soonest = soonest or tick
                unkeyed += [run] if run.status != PENDING else []
                continue
            if s.q("tick_exists", schedule=due.name, tick=self._ts(tick)):
                raise _Abort  # another instance materialized this tick
            if due.overlap == "skip":  # recorded as skipped: a row while there is room
                if room <= 0:
                    counted += 1
                    continue
                room -= 1
            if self._overlap(s, due, tick, manual=False)[1]:
                soonest = soonest or tick
        for tick, reason in plan.skipped:
            skipped = self._tick_run(due, tick, status="skipped", error=simple_error("Misfire", reason))
            self._insert_run(s, skipped)
        following = plan.next_run_at
        if plan.ahead is not None:
            if self._ahead(s, due, plan.ahead):
                soonest = soonest or plan.ahead
            else:
                following = plan.ahead  # planned when it comes (overlap judged at the tick)
        if not s.q(
            "advance_schedule",
            name=due.name,
            old=self._ts(due.next_run_at),
            new=self._ts(following),
            skipped_more=plan.skipped_more + counted,
        ):
            raise _Abort
        if due.overlap != "concurrent" and s.q("promote_held", schedule=due.name):
            # Holding the schedule's row lock now: an active run that ended while we were
            # inserting held ticks could not see them; we handed its slot on ourselves.
            self._notify(s, "run")
        if soonest is not None:
            self._notify_run(s, soonest, None)
        return following

    def _ahead(self, s: Session, due: DueSchedule, tick: datetime) -> bool:
        """Insert the run of a tick that has not come yet (due at the tick). Refused (False)
        while an exclusive schedule has an active run: a run that ends before the tick
        must still let the tick run under overlap=skip, so the policy is applied then."""
        if due.overlap != "concurrent" and s.q("schedule_busy", schedule=due.name):
            return False
        # Unclaimed by its due time (the tick, plus its jitter) + grace (its maker killed, no
        # worker running), it is judged by the misfire policy as a tick made late
        # (judge_ahead); "all" runs it whenever.
        run = self._tick_run(due, tick, skip_unkeyed=True)
        self._gate(s, [run])
        if run.status != PENDING:  # its keys cannot be computed: recorded skipped at its tick
            return False
        deadline = None if due.misfire == "all" else (run.due_at or tick) + timedelta(seconds=due.misfire_grace)
        if s.q("insert_ahead", **self._run_params(run), misfire_at=self._ts(deadline)):
            return True
        if s.q("tick_exists", schedule=due.name, tick=self._ts(tick)):
            raise _Abort  # another instance materialized this tick
        return False  # a run of the schedule became active meanwhile

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
            self._insert_run(s, skipped)
            return None, False
        if due.overlap == "replace":
            error = simple_error("Replaced", f"replaced by {when} (overlap=replace)")
            s.q("cancel_held", schedule=due.name, error=error)
            if active_id is not None and active_status == PENDING:
                s.q("cancel_active_pending", id=active_id, error=error)
                rows = self._insert_run(s, self._tick_run(due, tick, **extra))
                if rows:
                    return int(rows[0][0]), True
            elif active_id is not None:
                s.q("request_cancel", id=active_id)
                self._notify(s, f"cancel:{active_id}")
        rows = self._insert_run(s, self._tick_run(due, tick, held=True, **extra))
        if not rows:  # the tick's row came in meanwhile: another instance committed it first
            if manual:  # a retry keeping its run's key, which an active run holds
                raise TriggerRefused(
                    f"schedule {due.name!r}: key {extra.get('key')!r} is held by another active run; "
                    "wait for it or cancel it"
                )
            raise _Abort  # as when tick_exists finds it: this instance's pass is rolled back
        return int(rows[0][0]), False

    def trigger(
        self, due: DueSchedule, *, key: str | None = None, retry_of: int | None = None, once: bool = False
    ) -> tuple[int, str]:
        extra = {"key": key, "retry_of": retry_of}
        with self._tx() as s:
            if retry_of is not None:  # App.retry: ordered with retry_many's batches
                s.q("retry_lock")
                if once and s.q("retried_before", id=retry_of):
                    raise TriggerRefused(f"run {retry_of} was retried meanwhile")
            rows = self._insert_run(s, self._tick_run(due, None, **extra))
            if not rows and due.overlap != "concurrent" and self._withdraw_ahead(s, due.name, "was triggered"):
                # The run in the way was only made ahead of a tick to come: not active for
                # the overlap policy. Withdrawn, its tick is planned again when it comes and
                # meets the policy then, with this run as the active one.
                self._notify(s, "schedule")
                rows = self._insert_run(s, self._tick_run(due, None, **extra))
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
            jitter=r[29],
        )

    def list_schedules(self, include_inactive: bool = False) -> list[ScheduleInfo]:
        suffix = "" if include_inactive else " WHERE active"
        rows = self._select("schedule_columns", suffix + " ORDER BY name")
        return [self._schedule_from_row(r) for r in rows]


def _due_at(due: DueSchedule, tick: datetime | None) -> datetime | None:
    """When a tick's run may start: the tick plus its jitter offset (None: at the tick)."""
    if tick is None or not due.jitter:
        return None
    return stored_due(due.name, tick, due.jitter, due.cron, due.every, due.tz)
