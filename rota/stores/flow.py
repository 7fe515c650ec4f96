"""The store's contract for the flow controls of schedules and history (issue 20):
backfilling a schedule's past ticks and retrying many final runs in bounded batches."""

from __future__ import annotations

import abc
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

BACKFILL_CAP = 10_000  # ticks per backfill call
RETRY_BATCH = 500  # runs retried per transaction by App.retry_many
UnkeyedSkip = tuple[str, datetime | None, str | None]  # schedule, tick, error (JSON)


@dataclass(slots=True)
class RetryBatch:
    """One batch of App.retry_many: the last run id looked at (the cursor), the ids of the
    retries inserted, and the matching runs of exclusive schedules, which are retried one
    by one through the schedule's overlap policy (as App.retry does)."""

    last_id: int
    retried: list[int] = field(default_factory=list)
    exclusive: list[int] = field(default_factory=list)


class FlowStore(abc.ABC):
    """Backfill and bulk retry; both SQL stores implement it in one mixin (sqlstore/flow.py)."""

    # The ticks recorded skipped, once committed, because their limit or rate keys cannot be
    # computed (rota.limit_specs: in a tick pass, or keying a tick made elsewhere before a
    # flow claim), until a worker takes them to send run_skipped. Bounded: a store no worker
    # drains keeps the newest.
    unkeyed_skips: deque[UnkeyedSkip]

    def take_unkeyed_skips(self) -> list[UnkeyedSkip]:
        """The ticks recorded skipped as unkeyable since the last call, oldest first (each
        taken by one caller: popleft is atomic)."""
        taken = []
        while True:
            try:
                taken.append(self.unkeyed_skips.popleft())
            except IndexError:
                return taken

    @abc.abstractmethod
    def backfill(self, name: str, ticks: Sequence[datetime], *, exclusive: bool) -> list[int]:
        """Insert one run per tick of schedule `name` that has no run yet (a tick whose run
        was skipped counts as none: that run keeps its history but gives the tick up), in
        one transaction. Only ticks before the schedule's next planned tick and not in the
        future are taken: the later ones are the schedule's own. Exclusive runs are held
        behind each other (oldest first) and behind the schedule's active run; the runs are
        due now and marked `backfill`. Returns the ids created, oldest tick first; raises
        ScheduleNotFound for an unknown or removed schedule."""

    @abc.abstractmethod
    def retry_batch(
        self,
        status: str,
        task: str | None,
        since: datetime | None,
        after_id: int,
        upto_id: int,
        limit: int,
    ) -> RetryBatch | None:
        """Retry (as new runs with retry_of) up to `limit` runs with `status`, id in
        (after_id, upto_id], of `task` if given, finished at or after `since` if given, in
        one transaction; None when no run is left. Runs of exclusive schedules are only
        listed (RetryBatch.exclusive). A keyed run whose key is taken by an active run gets no
        retry."""

    @abc.abstractmethod
    def last_run_id(self) -> int:
        """The highest run id so far (0 if none): App.retry_many stops there, so the runs it
        creates are never retried again by the same call."""
