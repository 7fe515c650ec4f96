"""Backfill and bulk retry for both SQL stores (the contract is in .flow)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ... import quarantine, undeclared
from ...errors import ScheduleNotFound
from ...limit_specs import UNRESOLVED, Keys, resolved, warn_skipped
from ...models import PENDING
from ..base import NewRun, ScheduleDef
from ..flow import RetryBatch
from .schedules import SqlSchedules


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
            runs = [_backfill_run(sdef, tick, now, exclusive) for tick in todo]
            self._gate(s, runs)  # one lookup of the task's stored spec, if not declared here
            for run in runs:
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
            s.q("retry_lock")  # concurrent callers: each run is retried once (see the query)
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
                batch.retried = self._retry_insert(s, plain)
            if batch.retried:
                self._notify(s, "run")
            return batch

    def _retry_insert(self, s: Any, ids: list[int]) -> list[int]:
        """Insert the retries, then give them their task's limit and rate as declared now
        (here, or as stored): the retried run's own may predate a deploy."""
        rows = s.q("retry_insert", ids=self._id_list(ids))
        runs = {int(r[0]): NewRun(task=str(r[1]), args=str(r[2]), kwargs=str(r[3])) for r in rows}
        self._gate(s, list(runs.values()))
        for run_id, r in runs.items():
            if r.limit_name is not None or r.rate_name is not None:
                s.q("flow_set_gates", id=run_id, **_gates(r))
        return list(runs)

    # -- the stored declarations of tasks (rota.limit_specs) ---------------------------------
    def sync_specs(self, specs: Mapping[str, str], plain: Sequence[str]) -> None:
        """Store this deploy's spec of each task with a limit or a rate, and drop the specs of
        the tasks it declares without (the newest deploy wins)."""
        with self._tx() as s:
            for task, spec in sorted(specs.items()):
                s.q("flow_put_spec", task=task, spec=spec)
            if plain:
                s.q("flow_drop_specs", tasks=self._names(sorted(plain)))

    def resolve_runs(self, tasks: Mapping[str, Any], batch: int = 100) -> int:
        """Key up to `batch` runs of the declared `tasks` that were made where their keys
        could not be computed (limit_specs.UNRESOLVED); returns how many. A schedule's tick
        the code cannot key either is recorded skipped, as the tick pass records one (its
        trigger counts it in the schedule's skip_count), and logged once committed."""
        names = self._names(sorted(tasks))
        skipped: list[tuple[str, datetime | None, str | None]] = []
        with self._tx() as s:
            rows = s.q("flow_unresolved", unresolved=UNRESOLVED, tasks=names, n=batch)
            for run_id, task, args, kwargs, schedule, tick in rows:
                keys = resolved(tasks[str(task)], str(args), str(kwargs), tick=tick is not None)
                if keys.status != PENDING:  # a tick (not a backfill): its schedule and tick
                    if s.q("flow_skip_unkeyed", id=run_id, unresolved=UNRESOLVED, error=keys.error):
                        skipped.append((str(schedule), self._dt(tick), keys.error))
                    continue
                s.q("flow_resolve", id=run_id, unresolved=UNRESOLVED, **_gates(keys))
            if rows:
                self._notify(s, "run")
        for schedule, tick, error in skipped:
            warn_skipped(schedule, tick, error)
            self.unkeyed_skips.append((schedule, tick, error))  # a worker sends run_skipped
        return len(rows)

    def count_unresolved(self) -> int:
        """Pending runs waiting for a worker that declares their task to compute their keys."""
        with self._read() as s:
            return int(s.q("flow_unresolved_count", unresolved=UNRESOLVED)[0][0])

    def undeclared_flow(self, report: bool = False) -> list[tuple[str, str, int]]:
        """The limit and rate names that pending runs wait under and no stored limit or rate
        defines, as (kind "limit" or "rate", name, runs waiting): they wait, never unlimited,
        until a worker that declares them starts (rota.undeclared). If `report`, each name is
        logged once (again only after an hour while it stays undeclared): a worker's check."""
        with self._read() as s:
            found = [("limit", str(r[0]), int(r[1])) for r in s.q("flow_unknown_limits", unresolved=UNRESOLVED)]
            found += [("rate", str(r[0]), int(r[1])) for r in s.q("flow_unknown_rates")]
        if report and found:  # the names first: a blip there must not mark a name as logged
            names = self.pool_names()
            if entries := undeclared.due(found):
                undeclared.warn(entries, names)
        return found

    def pool_names(self) -> dict[str, list[str]]:
        """The names of the stored limits and rates, by kind (for "did you mean")."""
        with self._read() as s:
            rows = s.q("flow_damaged")  # every stored limit, rate and spec: small tables
        kinds = {"l": "limit", "r": "rate"}
        names: dict[str, list[str]] = {"limit": [], "rate": []}
        for r in rows:
            if str(r[0]) in kinds:
                names[kinds[str(r[0])]].append(str(r[1]))
        return names

    def undeclared_of(self, run_id: int) -> tuple[str | None, str | None] | None:
        """A pending run's limit and rate names that no stored limit or rate defines (None
        for each that is declared, or that it has not); None if it is not a pending run with
        a limit or a rate."""
        with self._read() as s:
            rows = s.q("flow_undeclared_of", id=run_id, unresolved=UNRESOLVED)
        if not rows:
            return None
        return (None if rows[0][0] is None else str(rows[0][0]), None if rows[0][1] is None else str(rows[0][1]))

    def last_run_id(self) -> int:
        return int(self._select("last_run_id")[0][0])

    def fail_orphaned(self, limit: int = 100) -> list[int]:
        """Set aside (failed as damaged) the runs waiting on parents none of which is pending or
        running any more: a parent deleted by hand, or a damaged count; each named once."""
        error = json.dumps(quarantine.run_error(ORPHANED))
        with self._tx() as s:
            rows = s.q("deps_orphaned", error=error, limit=limit)
        for run_id, _ in rows:
            quarantine.report(quarantine.RUN, run_id, ORPHANED)
        return [int(r[0]) for r in rows]

    def fail_keyless(self, limit: int = 100) -> list[int]:
        """Set aside (failed as damaged) the waiting runs with a stored limit's or rate's name
        and no key, which no claim can take; each named once."""
        with self._tx() as s:
            rows = s.q("flow_keyless", error=json.dumps(quarantine.run_error(KEYLESS)), limit=limit)
        for run_id, _ in rows:
            quarantine.report(quarantine.RUN, run_id, KEYLESS)
        return [int(r[0]) for r in rows]


KEYLESS = "it has the name of a limit or a rate and no key: no claim can take it"
ORPHANED = "it waits on parents none of which is pending or running (one deleted by hand, or its count damaged)"


def _gates(r: NewRun | Keys) -> dict[str, Any]:
    return {"limit_name": r.limit_name, "limit_key": r.limit_key, "rate_name": r.rate_name, "rate_key": r.rate_key}


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
