"""Flow controls on schedules and history (issue 20): backfill a schedule's past ticks and
retry many final runs at once. The tick arithmetic is in rota.timing; the atomic writes
are the store's (rota.stores.flow)."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, cast

from . import timing
from .client import Client, check_repairable
from .errors import ConfigurationError, ScheduleNotFound, TriggerRefused, did_you_mean, one_of, shown
from .models import FINAL_STATUSES
from .stores.flow import BACKFILL_CAP, RETRY_BATCH
from .tasks import RunHandle

if TYPE_CHECKING:
    from .app import App

log = logging.getLogger("rota")
SINCE_MAX = 36500 * 86400  # retry_many since=: 100 years, in seconds


class FlowClient(Client):
    """App.backfill and App.retry_many (and their async twins)."""

    def backfill(self, name: str, *, start: datetime, end: datetime, overlap: str | None = None) -> list[RunHandle]:
        """Make one run per tick of schedule `name` in [start, end) that has no run yet (a
        skipped tick counts as none), marked `backfill` and due now. `start` and `end` must be
        timezone-aware. Ticks from the schedule's next planned tick on, and ticks in the
        future, are left to the schedule. An exclusive schedule's runs (overlap skip, queue or
        replace) run one after another, oldest first, after its active run; a concurrent
        schedule's at once; `overlap=` overrides that ("concurrent" or one of the others).
        At most 10,000 ticks per call. Returns the handles of the runs created (calling it
        again creates none)."""
        store = self.store
        sdef = store.get_schedule_def(name) if isinstance(name, str) else None
        if sdef is None or not (info := store.get_schedule(name)) or not info.active:
            known = [s.name for s in store.list_schedules()]
            raise ScheduleNotFound(f"no active schedule named {name!r}{did_you_mean(str(name), known)}")
        check_repairable(info, {"next_run_at": None}, "backfill")
        for label, moment in (("start", start), ("end", end)):
            if not isinstance(moment, datetime) or moment.tzinfo is None or moment.utcoffset() is None:
                raise ConfigurationError(
                    f"backfill {label} must be a timezone-aware datetime (e.g. datetime(..., tzinfo=UTC)), got {moment!r}"
                )
        policy = sdef.overlap if overlap is None else timing.check_overlap(overlap)
        every = timedelta(seconds=sdef.every) if sdef.every is not None else None
        trigger = timing.make_trigger(cron=sdef.cron, every=every, tz=sdef.tz)
        ticks = timing.ticks_between(trigger, start, end, BACKFILL_CAP)
        ids = store.backfill(name, ticks, exclusive=policy != "concurrent")
        log.info("backfill of %r: %d run(s) created for %d tick(s) in range", name, len(ids), len(ticks))
        return [RunHandle(cast("App", self), str(run_id)) for run_id in ids]

    def retry_many(
        self, *, status: str = "failed", task: str | None = None, since: timedelta | float | None = None
    ) -> int:
        """Retry every final run with `status` (of `task`, finished within `since`), as
        App.retry does: one new run each, `retry_of` pointing back. Works in batches of 500
        runs per transaction, up to the newest run when the call began (its own retries are
        never retried again). A run of an exclusive schedule goes through its overlap policy
        (under 'skip', only the first is retried while it is active; under 'replace', the
        first replaces the active run and the rest queue behind it). A run set aside as
        damaged (error type DamagedRow or CorruptArguments) is passed over: repair it and
        `retry` it by id. Returns how many runs were created."""
        if status not in FINAL_STATUSES:
            raise one_of(status, FINAL_STATUSES, "final status")
        if task is not None and not isinstance(task, str):
            raise ConfigurationError(f"task must be a task name, got {task!r}")
        window = _since(since)
        if task is not None:
            self._check_task_known(task)
        store = self.store
        after = store.now() - window if window is not None else None
        upto, cursor, count = store.last_run_id(), 0, 0
        retried: set[str] = set()  # schedules retried: under 'replace' the next queue behind
        while (batch := store.retry_batch(status, task, after, cursor, upto, RETRY_BATCH)) is not None:
            cursor = batch.last_id
            count += len(batch.retried)
            for run_id in batch.exclusive:
                count += self._retry_exclusive(run_id, retried)
        return count

    async def backfill_async(
        self, name: str, *, start: datetime, end: datetime, overlap: str | None = None
    ) -> list[RunHandle]:
        return await asyncio.to_thread(self.backfill, name, start=start, end=end, overlap=overlap)

    async def retry_many_async(
        self, *, status: str = "failed", task: str | None = None, since: timedelta | float | None = None
    ) -> int:
        return await asyncio.to_thread(self.retry_many, status=status, task=task, since=since)

    def _check_task_known(self, task: str) -> None:
        """A task this app does not declare and no run names is a typo: refused, not "0 retried"."""
        if task in self.tasks or self.list_runs(task=task, limit=1):
            return
        names = set(self.tasks) | {r.task for r in self.list_runs(limit=500)}  # a removed task's runs still list
        raise ConfigurationError(
            f"no run of task {task!r} exists{did_you_mean(task, names)}: nothing to retry "
            "(a task is named in full, as `rota runs` shows it)"
        )

    def _retry_exclusive(self, run_id: int, retried: set[str]) -> int:
        """Retry a run of an exclusive schedule through its overlap policy; under 'replace'
        only the first of the schedule's retries replaces its active run, the others queue
        behind it, oldest first (they would otherwise cancel one another)."""
        try:
            self._retry(run_id, retried)
        except (TriggerRefused, ConfigurationError) as exc:
            log.info("retry_many: run %d not retried: %s", run_id, exc)
            return 0
        return 1


def _since(since: object) -> timedelta | None:
    """retry_many's `since`: a positive timedelta or number of seconds (as everywhere else),
    at most SINCE_MAX (a longer one is "all": pass None; past it `now - since` overflows)."""
    if since is None:
        return None
    seconds = since.total_seconds() if isinstance(since, timedelta) else since
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and 0 < seconds <= SINCE_MAX:
        return since if isinstance(since, timedelta) else timedelta(seconds=seconds)
    raise ConfigurationError(
        f"since must be a positive timedelta or number of seconds, at most 100 years ({SINCE_MAX}), got {shown(since)}"
    )
