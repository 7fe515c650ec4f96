"""The narrow view of the app a worker needs. `rota.App` satisfies it; the worker package
never imports the app (the arrows run one way: the app builds workers)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol

from ..clock import Clock
from ..stores.base import Store
from ..tasks import Task


class EventSink(Protocol):
    """Where a worker hands events for the app's hooks (rota.events.Events)."""

    def emit(
        self,
        name: str,
        worker_id: str | None,
        *,
        run_id: int | None = None,
        schedule: str | None = None,
        tick: datetime | None = None,
        detail: str | None = None,
    ) -> None: ...

    def drain(self, timeout: float = 5.0) -> bool: ...


class WorkerView(Protocol):
    """Tasks, schedules, settings and store of the app a worker runs."""

    concurrency: int
    lease: float
    poll_interval: float
    shutdown_timeout: float
    default_timeout: float
    prune_interval: float
    high_frequency: float
    retention: dict[str, timedelta]
    clock: Clock | None

    @property
    def tasks(self) -> Mapping[str, Task[Any, Any]]: ...

    @property
    def schedules(self) -> Mapping[str, Any]: ...

    @property
    def store(self) -> Store: ...

    @property
    def events(self) -> EventSink: ...

    @property
    def database_label(self) -> str: ...

    def prepare(self) -> None: ...

    def release_process_locks(self) -> None: ...

    def _adopt_worker(self, worker: Any) -> None: ...
