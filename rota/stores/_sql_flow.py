"""Backfill and bulk retry for both SQL stores (the contract is in .flow)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..errors import ScheduleNotFound
from ._sql_schedules import SqlSchedules
from .base import NewRun, ScheduleDef
from .flow import RetryBatch


class SqlFlow(SqlSchedules):
    """Operations of issue 20 on schedules' past ticks and on history."""

    def _id_list(self, ids: Sequence[int]) -> Any:
        return json.dumps(list(ids)) if self.dialect == "sqlite" else list(ids)

    def _time_list(self, times: Sequence[datetime]) -> Any:
        values = [self._ts(t) for t in times]
        return json.dumps(values) if self.dialect == "sqlite" else values

    def backfill(self, name: str, ticks: Sequence[datetime], *, exclusive: bool) -> list[int]:
        sdef = self.get_schedule_def(name)
        if sdef is None:
            raise ScheduleNotFound(f"no active schedule named {name!r}")
        now = self.now()
        with self._tx() as s:
            rows = s.q("backfill_bound", name=name)
            if not rows:
                raise ScheduleNotFound(f"no active schedule named {name!r}")
            bound = self._dt(rows[0][0])
            todo = [t for t in ticks if t <= now and (bound is None or t < bound)]
            if not todo:
                return []
            s.q("backfill_release", name=name, ticks=self._time_list(todo))
            created: list[int] = []
            for tick in todo:
                run = _backfill_run(sdef, tick, now, exclusive)
                inserted = s.q("backfill_insert", **self._run_params(run), backfill=True)
                if inserted:
                    created.append(int(inserted[0][0]))
            if exclusive and created:
                s.q("promote_held", schedule=name)  # the slot is free: the oldest held tick takes it
            if created:
                self._notify(s, "run")
            return created

    def retry_batch(
        self,
        status: str,
        task: str | None,
        since: datetime | None,
        after_id: int,
        upto_id: int,
        limit: int,
    ) -> RetryBatch | None:
        with self._tx() as s:
            rows = s.q(
                "retry_candidates",
                status=status,
                task=task,
                since=self._ts(since),
                after=after_id,
                upto=upto_id,
                limit=limit,
            )
            if not rows:
                return None
            batch = RetryBatch(last_id=int(rows[-1][0]))
            plain = [int(r[0]) for r in rows if not r[1]]
            batch.exclusive = [int(r[0]) for r in rows if r[1]]
            if plain:
                batch.retried = [int(r[0]) for r in s.q("retry_insert", ids=self._id_list(plain))]
            if batch.retried:
                self._notify(s, "run")
            return batch

    def last_run_id(self) -> int:
        return int(self._select("last_run_id")[0][0])


def _backfill_run(sdef: ScheduleDef, tick: datetime, now: datetime, exclusive: bool) -> NewRun:
    return NewRun(
        task=sdef.task,
        args=sdef.args,
        kwargs=sdef.kwargs,
        queue=sdef.queue,
        priority=sdef.priority,
        scheduled_for=tick,
        due_at=now,
        max_attempts=sdef.max_attempts,
        timeout=sdef.timeout,
        backoff=sdef.backoff,
        schedule=sdef.name,
        tick=tick,
        exclusive=exclusive,
        held=exclusive,
    )
