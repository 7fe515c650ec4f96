"""App: settings, the store, workers and named locks; declaring tasks and schedules comes from
rota.declare, the client operations from rota.client."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from . import config, limit_specs
from .aio import AsyncClient
from .client import Client
from .clock import Clock
from .declare import ScheduleSpec, build_schedule, check_name
from .errors import (
    ConfigurationError,
    SchemaVersionError,
    shown,
)
from .events import Event, Events, Notifier
from .flow_ops import FlowClient
from .models import FINAL_STATUSES, LockInfo
from .operate import OperatorClient
from .stores import open_store
from .stores.base import Store
from .tasks import RunContext, Task, check_int, check_queue

if TYPE_CHECKING:
    from .locks import AsyncLockContext, Lease, LockContext
    from .worker import Worker

P = ParamSpec("P")
R = TypeVar("R")
log = logging.getLogger("rota")

DEFAULT_DATABASE_URL = "sqlite:///rota.db"
DEFAULT_RETENTION: dict[str, timedelta] = dict(config.DEFAULT_RETENTION)  # a sentinel too: "not given"


def _pg_options(cfg: dict[str, Any], url: str, *given: Any) -> dict[str, Any]:
    """The store options of the PostgreSQL-only settings: the pool size, a transaction pooler
    and the direct URL for LISTEN (see the deploy guide). From ROTA_* variables they are
    ignored on SQLite; given in code there, open_store refuses them."""
    if url.startswith("sqlite") and all(value is None for value in given):
        return {}
    config.remember_secrets(cfg["listen_url"])
    options = {"pool_size": cfg["pool_size"], "pooler": cfg["pooler"], "listen_url": cfg["listen_url"]}
    return {k: v for k, v in options.items() if v is not None}


class App(FlowClient, Client, OperatorClient, AsyncClient):
    """A rota application: tasks, schedules, and the database they live in.

    ```python
    app = rota.App()  # ROTA_DATABASE_URL, else sqlite:///rota.db
    app = rota.App("postgresql://rota@db.example/rota", concurrency=8)  # several hosts
    ```
    """

    def __init__(
        self,
        database_url: str | None = None,
        *,
        name: str = "default",
        concurrency: int | None = None,
        lease: float | None = None,
        poll_interval: float | None = None,
        shutdown_timeout: float | None = None,
        default_timeout: float | None = None,
        clock: Clock | None = None,
        locks_url: str | None = None,
        retention: Mapping[str, timedelta] | None = DEFAULT_RETENTION,
        prune_interval: float | None = None,
        high_frequency: float | None = None,
        pool_size: int | None = None,
        pooler: str | None = None,
        listen_url: str | None = None,
        store_options: Mapping[str, Any] | None = None,
        notifiers: Sequence[Notifier] | None = None,
    ) -> None:
        # Arguments left None (retention: left at its default) come from ROTA_* variables, else
        # defaults: rota.config holds the table; setting_sources says where each came from.
        cfg, self.setting_sources = config.resolve(
            database_url=database_url or None,
            concurrency=concurrency,
            lease=lease,
            poll_interval=poll_interval,
            shutdown_timeout=shutdown_timeout,
            default_timeout=default_timeout,
            locks_url=locks_url,
            prune_interval=prune_interval,
            high_frequency=high_frequency,
            pool_size=pool_size,
            pooler=pooler,
            listen_url=listen_url,
            retention=None if retention is DEFAULT_RETENTION else (retention or {}),
        )
        self._take_settings(cfg, name, clock)
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.schedules: dict[str, ScheduleSpec] = {}
        self._store_options: dict[str, Any] = _pg_options(cfg, self.database_url, pool_size, pooler, listen_url)
        self._store_options.update(store_options or {})  # e.g. PostgreSQL lock_timeout=...
        # Construct now so that a bad URL fails here, naming itself; connect on first use.
        self._store: Store = open_store(self.database_url, clock, **self._store_options)
        self._init_state(notifiers)

    def _init_state(self, notifiers: Sequence[Notifier] | None) -> None:
        self._ready = False
        self._lock = threading.Lock()
        self._workers: list[Worker] = []
        self._locks: Any = None
        self.events = Events(self)  # hooks and notifiers (rota.events)
        for notifier in notifiers or ():
            self.add_notifier(notifier)

    def _take_settings(self, cfg: dict[str, Any], name: str, clock: Clock | None) -> None:
        self.database_url: str = cfg["database_url"]
        self.name = check_name("app", name)
        self.concurrency: int = check_int("concurrency", cfg["concurrency"], low=1, high=10_000)  # as ROTA_CONCURRENCY
        self.lease: float = config.check_seconds("lease", cfg["lease"], config.MIN_LEASE)
        self.poll_interval: float = config.check_seconds(
            "poll_interval", cfg["poll_interval"], config.MIN_POLL_INTERVAL
        )
        self.shutdown_timeout: float = cfg["shutdown_timeout"]
        # The timeout of a run whose task sets none (seconds; 0: none): a hung handler ends.
        self.default_timeout: float = config.check_seconds("default_timeout", cfg["default_timeout"], 0.0)
        self.clock = clock
        self.locks_url: str | None = cfg["locks_url"]
        config.remember_secrets(self.database_url, self.locks_url)  # log lines and errors redact them
        if self.locks_url is not None:
            from .lock_backend import parse_locks_url

            parse_locks_url(self.locks_url)  # a bad URL fails here, not at the first lock
        self.retention = _check_retention(cfg["retention"])
        self.prune_interval: float = cfg["prune_interval"]
        # Schedules firing more often than this (seconds; 0: off) are warned about and marked.
        self.high_frequency: float = config.check_seconds("high_frequency", cfg["high_frequency"], 0.0)

    def __repr__(self) -> str:
        return f"<rota.App {self.name} {self.database_label}>"

    @property
    def database_label(self) -> str:
        return config.redact_url(self.database_url)

    # -- the store -----------------------------------------------------------------------
    @property
    def store(self) -> Store:
        """The store, connected and with its schema up to date (migrated on first use)."""
        if not self._ready:
            with self._lock:
                if not self._ready:
                    self._ensure_schema()
                    self._ready = True
        return self._store

    def _ensure_schema(self) -> None:
        current, latest = self._store.schema_version()
        if current > latest:
            raise SchemaVersionError(
                f"the database {self.database_label} has rota schema version {current}, newer than "
                f"the {latest} this version of rota knows: upgrade rota here"
            )
        if current < latest:
            applied = self._store.migrate()
            if applied:
                log.info("migrated %s: %s", self.database_label, ", ".join(applied))

    def migrate(self, *, dry_run: bool = False) -> list[str]:
        """Apply pending migrations; return their names (dry_run: only list them)."""
        applied = self._store.migrate(dry_run=dry_run)
        if not dry_run:
            self._store.check_writable()  # the workers' writes, as this user
            self._ready = True
        return applied

    def prepare(self) -> None:
        """What a worker does at start: connect, migrate, check it may write (PermissionDenied
        naming the privilege and table if not), upsert code schedules."""
        store = self.store
        store.check_writable()
        now = store.now()
        defs = [spec.to_def(source="code", app=self.name) for spec in self.schedules.values()]
        first = {spec.name: spec.trigger.next_after(now) for spec in self.schedules.values()}
        store.sync_schedules(self.name, defs, first)
        limit_specs.sync(store, self.tasks)  # limits and rates: this deploy's values win
        if store.schema_version()[0] >= 21:  # every task name: a process without the code checks them
            store.declare_tasks(list(self.tasks))

    def close(self) -> None:
        """Deliver queued hook events (briefly), release held locks, close every connection
        (SQLite: one a thread is in a call on is closed by that thread as the call ends);
        a store call after it raises DatabaseError (SQLite; the other stores connect again)."""
        self.events.close()
        if self._locks is not None:
            self._locks.close()  # releases this process's locks, stops the renewer thread
        self._store.close()
        self._ready = False

    def _adopt_worker(self, worker: Worker) -> None:
        """Remember a worker of this process (stats() reports it)."""
        if worker not in self._workers:
            self._workers.append(worker)

    # -- event hooks and notifiers ---------------------------------------------------------
    def on(self, *events: str, timeout: float | None = 10.0) -> Callable[[Callable[[Event], R]], Callable[[Event], R]]:
        """`@app.on("run_failed", ...)`: call a sync or async function with each such Event."""
        return self.events.on(*events, timeout=timeout)

    def add_notifier(self, notifier: Notifier) -> None:
        """Send events to a notifier (rota.notify.Webhook, rota.notify.Email)."""
        self.events.add_notifier(notifier)

    # -- workers -------------------------------------------------------------------------
    def worker(self, **options: Any) -> Worker:
        """A Worker for this app (see Worker for options); run it with `await w.run()`."""
        from .worker import Worker

        for queue in options.get("queues") or ():
            check_queue(queue)
        return Worker(self, **options)

    def run_worker(
        self,
        concurrency: int | None = None,
        queues: Sequence[str] | None = None,
        shutdown_timeout: float | None = None,
        **options: Any,
    ) -> None:
        """Run a worker in this thread until SIGTERM/SIGINT (drains, then returns)."""
        asyncio.run(
            self.run_worker_async(concurrency=concurrency, queues=queues, shutdown_timeout=shutdown_timeout, **options)
        )

    async def run_worker_async(
        self,
        concurrency: int | None = None,
        queues: Sequence[str] | None = None,
        shutdown_timeout: float | None = None,
        **options: Any,
    ) -> None:
        """Run a worker on the running event loop until stopped."""
        options.setdefault("metrics_port", config.value("metrics_port"))  # ROTA_METRICS_PORT
        options.setdefault("prefetch", config.value("prefetch"))  # ROTA_PREFETCH
        worker = self.worker(
            concurrency=concurrency,
            queues=list(queues) if queues else config.value("queues"),  # else ROTA_QUEUES
            shutdown_timeout=shutdown_timeout,
            **options,
        )
        await worker.run()

    # -- named locks ---------------------------------------------------------------------
    @property
    def locks(self) -> Any:
        if self._locks is None:
            from .lock_factory import make_lock_backend
            from .locks import LockManager

            with self._lock:
                if self._locks is None:
                    self._locks = LockManager(make_lock_backend(self))
        return self._locks

    def lock(self, name: str, ttl: float = 60.0, wait: float = 0.0) -> LockContext:
        """`with app.lock(name, ttl=60, wait=0) as lease:` — see rota.locks."""
        return self.locks.lock(name, ttl, wait)  # type: ignore[no-any-return]

    def lock_async(self, name: str, ttl: float = 60.0, wait: float = 0.0) -> AsyncLockContext:
        return self.locks.lock_async(name, ttl, wait)  # type: ignore[no-any-return]

    def try_lock(self, name: str, ttl: float = 60.0) -> Lease | None:
        return self.locks.try_lock(name, ttl)  # type: ignore[no-any-return]

    def list_locks(self) -> list[LockInfo]:
        return self.locks.list_locks()  # type: ignore[no-any-return]

    def release_process_locks(self) -> None:
        if self._locks is not None:
            self._locks.release_all()


def _check_retention(retention: Mapping[str, timedelta] | None) -> dict[str, timedelta]:
    if not retention:
        return {}
    result = {}
    for status, keep in retention.items():
        if status not in FINAL_STATUSES:
            raise ConfigurationError(
                f"retention applies to final statuses ({', '.join(sorted(FINAL_STATUSES))}), got {status!r}"
            )
        if not isinstance(keep, timedelta) or keep <= timedelta(0):
            raise ConfigurationError(f"retention for {status!r} must be a positive timedelta, got {shown(keep)}")
        result[status] = keep
    return result


__all__ = ["App", "RunContext", "ScheduleSpec", "build_schedule", "check_name"]
