"""Ticks: turning due schedule ticks into runs, in their own task, so a tick insert that
waits on a row lock (another host frozen mid-transaction) never holds up claims or rescue.

Ahead of time: the ticker wakes `lead` seconds before the next tick and inserts its run
then, as a pending run due at the tick (Materialization.ahead), so at the tick a worker
only claims it, as it claims a delayed run: one round trip instead of poll, materialize,
poll and claim. The lead (AHEAD, at most the poll interval) is long enough for the wake-up
to reach every worker before the tick (NOTIFY: milliseconds; SQLite's change watch: at most
200 ms apart) and short, because a run made ahead is visible as pending before its tick:
pausing, updating or redeploying the schedule in that window withdraws it (cancelled, the
tick planned again), and an exclusive schedule with an active run gets no run ahead (its
overlap policy is applied at the tick). Misfire decisions use the real now."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from .. import quarantine, timing
from ..errors import ConfigurationError, DatabaseError, DatabaseTransient, DatabaseUnavailable
from ..logs import log_event
from ..quarantine import DamagedRowError
from ..stores.base import DueSchedule, Materialization, Store
from .counters import WorkerCounters
from .db import Db
from .outage import Outage
from .schedule_checks import ScheduleChecks
from .service import wait_event
from .wakeups import DueTimes

log = logging.getLogger("rota.worker")
AHEAD = 0.3  # seconds: see the module's docstring


class Ticker:
    """Materializes due schedule ticks (shared by every worker; the store arbitrates)."""

    def __init__(
        self,
        worker: str,
        store: Callable[[], Store],
        db: Db,
        due: DueTimes,
        outage: Outage,
        counters: WorkerCounters,
        emit: Callable[..., None],
    ) -> None:
        self.worker = worker
        self.store = store
        self.db = db
        self.due = due
        self.outage = outage
        self.counters = counters
        self.emit = emit
        self.queues: list[str] | None = None
        self.poll_interval = 1.0
        self.claiming: Callable[[], bool] = lambda: True
        self.sleep_or_stop: Callable[[float], Awaitable[bool]] = lambda delay: _never(delay)
        self._triggers: dict[tuple[str | None, float | None, str], timing.Trigger] = {}
        self._bad_schedules: set[str] = set()
        self.checks = ScheduleChecks()
        self._held_back: datetime | None = None  # a tick not made ahead: wait for the tick itself
        self.made_ahead: dict[str, datetime] = {}  # schedule -> the last tick this worker made ahead

    @property
    def lead(self) -> float:
        """How long before a tick its run is made (bounded by the poll interval: a worker
        polling fast, as in tests, keeps its runs ahead within one poll)."""
        return min(AHEAD, self.poll_interval)

    def _wake_at(self) -> float | None:
        at = self.due.schedule_due
        if at is None or self.due.schedule_due_at == self._held_back:
            return at
        return at - self.lead

    async def run(self) -> None:
        """The ticker task: wait for the next tick (`lead` ahead) or poll, materialize, repeat."""
        due = self.due
        while self.claiming():
            deadline = time.monotonic() + self.poll_interval
            await wait_event(due.tick_wake, due.until(deadline, self._wake_at()))
            due.tick_wake.clear()
            if not self.claiming() or not due.due(self._wake_at()):
                continue
            try:
                if await self.ticks(self.lead):
                    due.wake.set()  # the claimer claims the runs just made (or sleeps until due)
            except DatabaseError as exc:
                await self.sleep_or_stop(self.outage.failed(exc))

    async def ticks(self, lead: float = 0.0) -> bool:
        """Materialize the schedule ticks due now (the database's now), and those due within
        `lead` seconds ahead. True after a pass (runs may have been made: the claimer
        looks, or re-arms its sleep for the due time it learned), False if none was due."""
        state = await self.db(self.store().poll_state, self.queues)
        horizon = state.now + timedelta(seconds=lead)
        tick = state.next_schedule_due
        if tick is None or tick > horizon or (tick > state.now and tick == self._held_back):
            self.due.learn(state)
            return False
        woke, more = await self.materialize(state.now, lead=lead)
        after = await self.db(self.store().poll_state, self.queues)
        self.due.learn(after)
        if woke:
            self.due.run_due = time.monotonic()
        tick = after.next_schedule_due
        # Still within the lead after this pass: refused ahead (an exclusive schedule busy)
        # or taken by another instance; look again at the tick, not in a busy loop.
        self._held_back = tick if tick is not None and state.now < tick <= horizon and not more else None
        if tick is not None and tick <= state.now and not more:
            # Still due for the time just planned: a schedule this worker cannot plan
            # (logged once). Look again at the next regular poll, not in a busy loop.
            self.due.schedule_due = None
        return True

    async def materialize(self, now: datetime, limit: int = 100, lead: float = 0.0) -> tuple[bool, bool]:
        """Turn due schedule ticks (and those due within `lead` s) into runs. Returns
        (whether a run may have become due now, whether more ticks are due at `now` than
        this pass took: a full batch of schedules, or a plan that stopped at its tick limit)."""
        woke = await self._judge_ahead()
        more = False
        batch = await self.db(self.store().due_schedules, limit, lead)
        for due in batch:
            if due.damage is not None:  # a damaged row: set aside until repaired
                await self._set_aside(due, due.damage)
                continue
            try:
                plan = self._plan(due, now, lead)
                if isinstance(plan, str):  # cannot be planned: record why, so it stops being due
                    await self.db(self.store().mark_plan_error, due, plan)
                    continue
                if await self._write(due, plan):
                    woke = woke or bool(plan.run)
                    more = more or plan.next_run_at <= now
            except (DamagedRowError, *quarantine.UNDECODABLE) as exc:  # one bad row never stops the rest
                await self._set_aside(due, quarantine.describe(exc))
        self.emit_unkeyed_skips()
        return woke, more or len(batch) >= limit

    async def _set_aside(self, due: DueSchedule, reason: str) -> None:
        """A schedule that cannot be planned (rota.quarantine): named once, and recorded as
        a plan error so that it stops being due on every worker (an update_schedule() or a
        pause and resume plans it again). One whose next fire time does not decode cannot
        be recorded (the record compares that time): every pass skips it."""
        self.checks.damaged(due.name, reason)
        if not due.corrupt:
            await self.db(self.store().mark_plan_error, due, f"damaged row: {reason}")

    async def _judge_ahead(self) -> bool:
        """Runs made ahead that no worker claimed by tick + misfire_grace (their maker was
        killed, no worker ran): judged by the misfire policy as ticks made that late would
        be (see Store.judge_ahead). True if one was made claimable again."""
        judged = await self.db(self.store().judge_ahead)
        for name, tick, why in judged:
            if why is None:
                message = f"schedule {name!r}: the run made ahead of {tick.isoformat()} runs late (misfire=coalesce)"
                log_event(log, logging.INFO, "tick_kept", message, schedule=name, worker=self.worker)
                continue
            self.emit("schedule_misfired", schedule=name, detail=f"1 tick(s) skipped: {why}")
            self.emit("run_skipped", schedule=name, tick=tick, detail=why)
        return any(why is None for _, _, why in judged)

    def emit_unkeyed_skips(self) -> None:
        """run_skipped for each tick the store recorded skipped because its limit or rate keys
        cannot be computed (in a tick pass, or keying a tick made elsewhere: see
        Store.take_unkeyed_skips), as for a tick skipped under the misfire policy."""
        for name, tick, error in self.store().take_unkeyed_skips():
            detail = json.loads(error or "{}").get("message")
            self.emit("run_skipped", schedule=name, tick=tick, detail=detail)

    async def _write(self, due: DueSchedule, plan: Materialization) -> bool:
        """Write one schedule's ticks; False if another instance (or a held row) won."""
        try:
            made = await self.db(self.store().materialize, due, plan)
        except DatabaseUnavailable:
            raise
        except DatabaseTransient as exc:  # e.g. a host frozen mid-tick holds this tick's row
            log.info("schedule %r: tick not materialized this pass (%s); trying its other schedules", due.name, exc)
            made = False
        if not made:
            self.counters.locked_out += 1
            message = f"schedule {due.name!r}: tick written by another instance"
            log_event(log, logging.DEBUG, "tick_locked_out", message, schedule=due.name, worker=self.worker)
            return False
        self.counters.ticks += len(plan.run) + (plan.ahead is not None)
        if plan.ahead is not None:
            self.made_ahead[due.name] = plan.ahead
        message = f"schedule {due.name!r}: {len(plan.run)} run(s) materialized"
        log_event(log, logging.DEBUG, "tick_materialized", message, schedule=due.name, worker=self.worker)
        self._emit_misfires(due, plan)
        return True

    async def withdraw_ahead(self) -> None:
        """A clean shutdown, once this ticker has stopped: withdraw the runs it made ahead
        whose tick has not come (see Store.withdraw_ahead), so a tick does not outlive its
        worker as a pending run that would fire late, past its misfire policy, on restart.
        A live worker makes the tick again (the "schedule" wake-up). A database error is
        logged and shutdown goes on (the run then fires when a worker next claims)."""
        soon = datetime.now(UTC) + self.due.db_offset - timedelta(seconds=1)
        names = sorted(name for name, tick in self.made_ahead.items() if tick > soon)
        self.made_ahead.clear()
        if not names:
            return
        why = f"had its tick made ahead by worker {self.worker}, which stopped"
        try:
            withdrawn = await self.db(self.store().withdraw_ahead, names, why)
        except DatabaseError as exc:
            log.warning("could not withdraw the runs made ahead of their tick for %s (%s)", names, exc)
            return
        if withdrawn:
            ticks = ", ".join(f"{name!r} at {tick.isoformat()}" for name, tick in sorted(withdrawn.items()))
            message = f"worker {self.worker} withdrew the runs it made ahead of their tick: {ticks}"
            log_event(log, logging.INFO, "ticks_withdrawn", message, worker=self.worker)

    def _plan(self, due: DueSchedule, now: datetime, lead: float = 0.0) -> Materialization | str:
        try:
            trigger = self._trigger(due)
            grace = timedelta(seconds=due.misfire_grace)
            jitter = timedelta(seconds=due.jitter) if due.jitter else None  # misfire judged at tick + offset
            plan = timing.plan_ticks(
                trigger, due.next_run_at, now, misfire=due.misfire, grace=grace, jitter=jitter, seed=due.name
            )
            ahead = timing.tick_ahead(plan.next_run_at, now, timedelta(seconds=lead))
            following = plan.next_run_at if ahead is None else trigger.next_after(ahead)
        except ConfigurationError as exc:
            if due.name not in self._bad_schedules:
                self._bad_schedules.add(due.name)
                log.error("schedule %r cannot be planned on this worker and is left alone: %s", due.name, exc)
            return str(exc)
        return Materialization(plan.run, plan.skipped, plan.skipped_more, following, ahead)

    def _trigger(self, due: DueSchedule) -> timing.Trigger:
        key = (due.cron, due.every, due.tz)
        trigger = self._triggers.get(key)
        if trigger is None:
            every = timedelta(seconds=due.every) if due.every is not None else None
            trigger = timing.make_trigger(cron=due.cron, every=every, tz=due.tz)
            self._triggers[key] = trigger
        return trigger

    def _emit_misfires(self, due: DueSchedule, plan: Materialization) -> None:
        if not (plan.skipped or plan.skipped_more):
            return
        count = len(plan.skipped) + plan.skipped_more
        reason = plan.skipped[0][1] if plan.skipped else "missed ticks"
        self.emit("schedule_misfired", schedule=due.name, detail=f"{count} tick(s) skipped: {reason}")
        for tick, why in plan.skipped:
            self.emit("run_skipped", schedule=due.name, tick=tick, detail=why)

    async def warn_about_fast_schedules(self, in_code: Mapping[str, Any], threshold: float) -> None:
        """The start-up warnings about schedules (see schedule_checks): damaged, too fast."""
        try:
            stored = await self.db(self.store().list_schedules)
        except DatabaseError:
            stored = []
        self.checks.at_start(stored, in_code, self.poll_interval, threshold)


async def _never(delay: float) -> bool:
    return False
