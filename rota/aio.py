"""The async client: `await app.get_run_async(...)` and friends, for asyncio web apps.

One implementation: each `*_async` method runs its sync twin in a worker thread
(`asyncio.to_thread`), so the event loop never waits on the database. Enqueueing has its
async twins on tasks (`enqueue_async`, `enqueue_many_async`); with `connection=` a psycopg
AsyncConnection they are awaited on that connection, inside its transaction (`rota.txn`).
`CLIENT_OPERATIONS` lists the operations that have both forms (a test keeps them in step).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from .app import App
    from .locks import Lease
    from .models import LockInfo, QueueInfo, Run, ScheduleInfo, WorkerInfo
    from .tasks import RunHandle, Task

CLIENT_OPERATIONS = (
    "get_run",
    "list_runs",
    "cancel",
    "retry",
    "trigger",
    "pause",
    "resume",
    "stats",
    "get_schedule",
    "list_schedules",
    "list_workers",
    "add_schedule",
    "update_schedule",
    "remove_schedule",
    "run_links",
    "list_locks",
    "try_lock",
    "migrate",
    "pause_queue",
    "resume_queue",
    "list_queues",
    "backfill",  # the twins of these two are in flow_ops.FlowClient
    "retry_many",
    "signal",  # its twin is in signals.SignalClient (rota.durable)
)
TASK_OPERATIONS = ("enqueue", "enqueue_many")
_GRACE = timedelta(seconds=60)  # add_schedule's default misfire_grace


class AsyncClient:
    """The async twins of App's client operations (mixed into App)."""

    @property
    def _sync(self) -> App:
        return cast("App", self)

    async def get_run_async(self, run_id: str | int) -> Run:
        return await asyncio.to_thread(self._sync.get_run, run_id)

    async def list_runs_async(
        self,
        status: str | None = None,
        task: str | None = None,
        schedule: str | None = None,
        limit: int = 100,
        *,
        queue: str | None = None,
        before: str | int | None = None,
        damaged: bool = False,
    ) -> list[Run]:
        return await asyncio.to_thread(
            self._sync.list_runs, status, task, schedule, limit, queue=queue, before=before, damaged=damaged
        )

    async def cancel_async(self, run_id: str | int, reason: str = "cancelled on request") -> Run:
        return await asyncio.to_thread(self._sync.cancel, run_id, reason)

    async def retry_async(self, run_id: str | int) -> RunHandle:
        return await asyncio.to_thread(self._sync.retry, run_id)

    async def trigger_async(self, name: str) -> RunHandle:
        return await asyncio.to_thread(self._sync.trigger, name)

    async def pause_async(self, name: str) -> ScheduleInfo:
        return await asyncio.to_thread(self._sync.pause, name)

    async def resume_async(self, name: str) -> ScheduleInfo:
        return await asyncio.to_thread(self._sync.resume, name)

    async def stats_async(self) -> dict[str, Any]:
        return await asyncio.to_thread(self._sync.stats)

    async def get_schedule_async(self, name: str) -> ScheduleInfo:
        return await asyncio.to_thread(self._sync.get_schedule, name)

    async def list_schedules_async(self, *, include_inactive: bool = False) -> list[ScheduleInfo]:
        return await asyncio.to_thread(self._sync.list_schedules, include_inactive=include_inactive)

    async def list_workers_async(self, *, stale_after: float | None = None) -> list[WorkerInfo]:
        return await asyncio.to_thread(self._sync.list_workers, stale_after=stale_after)

    async def add_schedule_async(
        self,
        name: str,
        task: Task[..., Any] | str,
        *,
        cron: str | None = None,
        every: timedelta | float | None = None,
        tz: str | None = None,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        overlap: str = "skip",
        misfire: str = "coalesce",
        misfire_grace: timedelta | float = _GRACE,
        run_immediately: bool = False,
        jitter: timedelta | float | None = None,
        **task_options: Any,
    ) -> ScheduleInfo:
        return await asyncio.to_thread(
            lambda: self._sync.add_schedule(
                name, task, cron=cron, every=every, tz=tz, args=args, kwargs=kwargs, overlap=overlap, misfire=misfire,
                misfire_grace=misfire_grace, run_immediately=run_immediately, jitter=jitter, **task_options,
            )
        )  # fmt: skip

    async def update_schedule_async(self, name: str, **changes: Any) -> ScheduleInfo:
        return await asyncio.to_thread(lambda: self._sync.update_schedule(name, **changes))

    async def remove_schedule_async(self, name: str) -> None:
        await asyncio.to_thread(self._sync.remove_schedule, name)

    async def run_links_async(self, run_id: str | int) -> dict[str, Any]:
        return await asyncio.to_thread(self._sync.run_links, run_id)

    async def list_locks_async(self) -> list[LockInfo]:
        return await asyncio.to_thread(self._sync.list_locks)

    async def try_lock_async(self, name: str, ttl: float = 60.0) -> Lease | None:
        return await asyncio.to_thread(self._sync.try_lock, name, ttl)

    async def migrate_async(self, *, dry_run: bool = False) -> list[str]:
        return await asyncio.to_thread(lambda: self._sync.migrate(dry_run=dry_run))

    async def pause_queue_async(self, queue: str, *, by: str | None = None) -> QueueInfo:
        return await asyncio.to_thread(lambda: self._sync.pause_queue(queue, by=by))

    async def resume_queue_async(self, queue: str, *, by: str | None = None) -> QueueInfo:
        return await asyncio.to_thread(lambda: self._sync.resume_queue(queue, by=by))

    async def list_queues_async(self) -> list[QueueInfo]:
        return await asyncio.to_thread(self._sync.list_queues)
