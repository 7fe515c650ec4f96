"""The store interface: the only place that knows SQL, and its contract.

Every operation here is atomic: it either happens completely or not at all, whatever other
workers do at the same time. Implementations (SQLite, PostgreSQL) carry no repeated
docstrings; this module is where the guarantees are written down.

Leases and fencing
------------------
`claim` moves due pending runs to `running`, sets `owner`, a fencing `token` that the run has
never had before (tokens only grow), and `lease_until` = now + lease, "now" being the
database's clock (or the configured clock in tests). Every later write about a running run
(`heartbeat`, `finish`, `hand_back`) names the token it holds and is a no-op when the run's
token no longer matches or it is no longer running: a worker whose lease was rescued can
neither extend it nor write a result. `rescue` is the only operation that takes a run from a
worker that did not give it up, and only once its lease has expired.

Schedules
---------
`materialize` turns a schedule's due ticks into runs and advances `next_run_at` with a
compare-and-set in the same transaction, so any number of instances may try and exactly one
wins; a unique (schedule, tick) index is the backstop. Exclusive schedules (overlap skip,
queue, replace) never have two active runs: a partial unique index enforces it and a
database trigger hands the slot to the oldest held tick when the active run ends.
"""

from __future__ import annotations

import abc
from collections import deque
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from datetime import datetime
from typing import Any, Protocol

from ..clock import Clock
from ..errors import ConfigurationError
from ..models import LockInfo, QueueInfo, Run, ScheduleInfo, WorkerInfo
from .flow import FlowStore
from .records import Claimed as Claimed
from .records import NewRun as NewRun
from .records import Outcome as Outcome
from .records import PollState as PollState
from .records import Rescued as Rescued
from .records import RunCounts as RunCounts
from .records import RunFilter as RunFilter
from .records import run_stats as run_stats
from .schedule_records import DueSchedule as DueSchedule
from .schedule_records import Materialization as Materialization
from .schedule_records import ScheduleDef as ScheduleDef


class HandlerTransaction(Protocol):
    """What `Store.handler_transaction` yields."""

    @property
    def connection(self) -> Any: ...

    def succeed(self, run_id: int, token: int, result: str | None) -> bool:
        """Record the run succeeded if (run_id, token) still holds it; False if not. Raises
        ConfigurationError if the handler ended the transaction itself."""
        ...


def finishes_with_claims(store: object) -> bool:
    """Whether `store` writes outcomes and claims in one transaction (overrides the default)."""
    method = getattr(type(store), "finish_and_claim", None)
    return method is not None and method is not Store.finish_and_claim


class Store(FlowStore, abc.ABC):
    """Atomic operations over one database. Thread-safe; one instance per App."""

    dialect: str
    url: str
    # How long before a run is due an idle worker claims it, held, to start it at its due
    # time (rota.worker.wakeups.CLAIM_AHEAD): longer than the claim's transaction takes.
    claim_lead: float = 0.02

    def __init__(self, url: str, clock: Clock | None = None) -> None:
        self.url = url
        self.clock = clock
        self.unkeyed_skips = deque(maxlen=1000)

    # -- lifecycle -----------------------------------------------------------------------
    @abc.abstractmethod
    def migrate(self, *, dry_run: bool = False) -> list[str]:
        """Apply pending migrations (under a lock, so concurrent starters don't race) and
        return their names. Raises SchemaVersionError if the database is newer than this code."""

    @abc.abstractmethod
    def check_writable(self) -> None:
        """Check that every kind of write rota does is allowed (privileges, then each write
        inside a transaction that is rolled back); PermissionDenied naming the missing
        privilege and the table otherwise. Workers and `migrate` call it at start."""

    @abc.abstractmethod
    def schema_version(self) -> tuple[int, int]:
        """(version applied in the database, latest version this code knows)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close every connection. Idempotent."""

    @abc.abstractmethod
    def now(self) -> datetime:
        """The store's clock: the configured clock, else the database's."""

    # -- enqueue -------------------------------------------------------------------------
    @abc.abstractmethod
    def insert_runs(self, runs: Sequence[NewRun], *, notify: bool = True) -> list[tuple[int, bool]]:
        """Insert runs; return (id, created) per input in order. A run with a key whose task
        already has a pending or running run with that key is not inserted: that run's id is
        returned with created=False. Wakes idle workers when a run is due soon."""

    # -- enqueue in a caller's transaction (rota.txn) -------------------------------------
    def foreign_session(self, conn: Any) -> AbstractContextManager[Any]:
        """A session on the caller's own driver connection, in whatever transaction it has
        open: its commit or rollback decides. ConfigurationError, before anything is
        written, unless the connection reaches this store's database and rota's tables."""
        raise ConfigurationError(f"the {self.dialect} store cannot enqueue on a caller's connection")

    def async_foreign_session(self, conn: Any) -> AbstractAsyncContextManager[Any]:
        """`foreign_session` for an async driver connection."""
        raise ConfigurationError(f"the {self.dialect} store cannot enqueue on an async connection")

    def insert_runs_in(self, session: Any, runs: Sequence[NewRun]) -> list[tuple[int, bool]]:
        """`insert_runs` in a foreign session: the runs (and the wake-up, delivered at commit
        where the backend can) commit or roll back with the caller's transaction. Keys
        deduplicate as in `insert_runs`, against the transaction's own runs too."""
        raise ConfigurationError(f"the {self.dialect} store cannot enqueue on a caller's connection")

    async def insert_runs_in_async(self, session: Any, runs: Sequence[NewRun]) -> list[tuple[int, bool]]:
        """`insert_runs_in` in an async foreign session."""
        raise ConfigurationError(f"the {self.dialect} store cannot enqueue on an async connection")

    # -- transactional handlers (rota.transactional) ---------------------------------------
    def handler_transaction(self) -> AbstractContextManager[HandlerTransaction]:
        """A transaction on a connection of this store's own database, for a transactional
        handler: its `connection` is the driver connection the handler writes on; `succeed`
        records a run's success in the transaction, token-checked. Commits when the block
        ends normally, rolls back when it raises."""
        raise ConfigurationError(f"the {self.dialect} store does not run transactional handlers")

    # -- the worker's hot path -----------------------------------------------------------
    @abc.abstractmethod
    def claim(
        self, owner: str, limit: int, queues: Sequence[str] | None, lease: float, start: int | None = None
    ) -> list[Claimed]:
        """Claim up to `limit` due pending runs (priority, then due time, then id), never
        one claimed by someone else at the same time, nor one whose cancellation was
        requested. Each gets a new token and a lease. The first `start` of them in that
        order (all if None) are started by the claim (attempt counted, started_at set); the
        rest are held: claimed, not started, the attempt not counted until `start`."""

    def claim_ahead(
        self, owner: str, limit: int, queues: Sequence[str] | None, lease: float, ahead: float
    ) -> list[Claimed]:
        """Claim, held, up to `limit` runs due within `ahead` seconds (the database's clock),
        in claim order: plain runs only (no limit or rate), never one queued or asked to
        cancel. An idle worker calls it just before a run's due time and starts each run at
        its due time on its own clock (rota/worker/claims.py). A store without it claims none."""
        return []

    @abc.abstractmethod
    def start(self, held: Sequence[tuple[int, int, float]]) -> set[int]:
        """Held runs (id, token, seconds since their handler started) start: the attempt
        counted, started_at set. Refused (not in the result) for a run whose token no longer
        holds it, that started already, or whose cancellation was requested."""

    @abc.abstractmethod
    def heartbeat(self, held: Sequence[tuple[int, int]], lease: float) -> tuple[set[int], set[int]]:
        """Extend the leases of (id, token) runs still held. Returns (ids still held, ids
        whose cancellation was requested); a run missing from the first set is lost."""

    def save_progress(self, rows: Sequence[tuple[int, int, float, str | None]]) -> set[int]:
        """ctx.progress of (id, token, fraction, message) runs still held (rota/stores/sqlstore/durable.py)."""
        raise NotImplementedError

    @abc.abstractmethod
    def finish(self, outcomes: Sequence[Outcome]) -> set[int]:
        """Record attempt outcomes; return the ids written. Stale tokens are not written."""

    def finish_and_claim(
        self,
        outcomes: Sequence[Outcome],
        owner: str,
        limit: int,
        queues: Sequence[str] | None,
        lease: float,
        start: int | None = None,
    ) -> tuple[set[int], list[Claimed]]:
        """`finish(outcomes)` then `claim(owner, limit, queues, lease)` in ONE transaction (one
        round trip where the driver can): both happen or neither does, so after an error no
        outcome was written and nothing was claimed. Returns (ids written, claimed). This
        default makes the two calls apart; workers use it only where a store overrides it
        (see `finishes_with_claims`)."""
        return self.finish(outcomes), self.claim(owner, limit, queues, lease, start)

    @abc.abstractmethod
    def hand_back(self, held: Sequence[tuple[int, int]], reason: str) -> set[int]:
        """Make runs pending again at once without counting the attempt (graceful stop);
        a run whose cancellation was requested ends cancelled instead."""

    @abc.abstractmethod
    def disown(self, owner: str, tokens: Sequence[int]) -> list[tuple[int, str]]:
        """After a claim whose outcome `owner` could not learn (its reply lost): the runs it
        owns with a token not in `tokens` (every token it holds) and a lease that still runs,
        as they were before that claim (no handler ran: no attempt counted, no rate start
        logged); cancellation requested: cancelled. Returns (id, status) of each."""

    @abc.abstractmethod
    def fence(self, held: Sequence[tuple[int, int]], lease: float, worker: str, at_once: bool = False) -> set[int]:
        """A stopping worker's last write for runs whose handlers still run: their leases
        end `lease` seconds from now (the database's clock), marked so that the rescue, which
        takes them once the worker's process has ended, records that the worker stopped
        while the handler ran (`at_once`: stopped at once by a second signal, else it
        outlived the shutdown timeout). Returns the ids fenced (token-checked)."""

    @abc.abstractmethod
    def rescue(self, limit: int = 100) -> list[Rescued]:
        """Take back running runs whose lease expired: a held one (never started) pending
        again with no attempt counted; a started one pending again if attempts remain
        (either cancelled if cancellation was requested), else failed with an error naming the
        lost worker and when its lease ran out. Never touches a run that is not running."""

    @abc.abstractmethod
    def poll_state(self, queues: Sequence[str] | None) -> PollState:
        """Now, the earliest due pending run and the earliest due schedule (cheap: indexes)."""

    def poll_after_claim(self, queues: Sequence[str] | None) -> PollState:
        """poll_state, after a claim that got fewer runs than it asked for (a store with
        limits leaves out the due runs that wait for a slot: see sqlstore/limits.py)."""
        return self.poll_state(queues)

    def limits_due(self) -> bool:
        """Whether due runs wait on limits whose slots the outcomes written with a claim free."""
        return False

    def limits_wait(self) -> bool:
        """Whether due runs wait for a slot of their limit that a run ending here may free."""
        return False

    def limits_full(self) -> bool:
        """Whether a claim now would find nothing: due runs wait for slots of their limits
        and no run without a limit is due (a worker then holds no runs ahead)."""
        return False

    def claim_cut_short(self) -> bool:
        """Whether the last claim stopped short of what is due (more are due now)."""
        return False

    # -- schedules -----------------------------------------------------------------------
    @abc.abstractmethod
    def sync_schedules(self, app: str, defs: Sequence[ScheduleDef], first_ticks: dict[str, datetime]) -> None:
        """Upsert code-declared schedules; a changed (or re-activated) definition gets
        next_run_at from `first_ticks` (now for run_immediately schedules that never ran).
        Code schedules of `app` that are not in `defs` become inactive (history kept). A
        changed definition withdraws the runs made ahead of their tick (cancelled, the tick
        planned again unless the new timing moves it), as update_schedule and pausing do."""

    @abc.abstractmethod
    def add_schedule(self, sdef: ScheduleDef, first_tick: datetime) -> None:
        """Create a schedule; ConfigurationError if an active one has that name."""

    @abc.abstractmethod
    def update_schedule(self, sdef: ScheduleDef, next_run_at: datetime | None) -> None:
        """Replace a schedule's definition; next_run_at None keeps the current one (the
        tick of a run made ahead, which this withdraws, included)."""

    @abc.abstractmethod
    def remove_schedule(self, name: str) -> int:
        """Deactivate a schedule (history kept) and cancel its pending runs; return how many."""

    @abc.abstractmethod
    def set_paused(self, name: str, paused: bool, next_run_at: datetime | None) -> None:
        """Pause/resume; resuming sets next_run_at (ticks missed while paused never run).
        Pausing withdraws the runs made ahead of their tick (Materialization.ahead)."""

    @abc.abstractmethod
    def withdraw_ahead(self, names: Sequence[str], why: str) -> dict[str, datetime]:
        """Withdraw the named schedules' runs made ahead of their tick that are not due yet
        and not claimed (cancelled, type Withdrawn, message "schedule ... {why} before this
        tick came"), rewind each schedule's next_run_at to its withdrawn tick and notify
        "schedule" (a live worker makes the tick again), in one transaction. Returns the
        rewound tick per schedule. A worker's clean shutdown calls it for the ticks it made."""

    @abc.abstractmethod
    def judge_ahead(self, limit: int = 100) -> list[tuple[str, datetime, str | None]]:
        """Judge the runs made ahead of their tick that no worker claimed by their misfire
        deadline (tick + misfire_grace; claims leave such a run alone) by the misfire policy,
        as a tick made that late would be (`rota.timing.judge_unclaimed`): skipped (type
        Misfire) or made claimable again. Returns (schedule, tick, skip reason or None if
        it runs) per run judged, oldest deadline first."""

    @abc.abstractmethod
    def due_schedules(self, limit: int, lead: float = 0.0) -> list[DueSchedule]:
        """Active, unpaused schedules whose next_run_at has come, or comes within `lead`
        seconds (to be materialized ahead, see Materialization.ahead); index on next_run_at."""

    @abc.abstractmethod
    def materialize(self, due: DueSchedule, plan: Materialization) -> bool:
        """Insert the plan's runs and skipped ticks and CAS next_run_at from due.next_run_at
        to plan.next_run_at, in one transaction. False (and nothing written) if another
        instance got there first."""

    @abc.abstractmethod
    def trigger(
        self, due: DueSchedule, *, key: str | None = None, retry_of: int | None = None, once: bool = False
    ) -> tuple[int, str]:
        """Insert a manual run of a schedule now, honouring its overlap policy. Returns
        (run id, 'started' | 'queued' | 'replacing'); TriggerRefused under overlap=skip.
        `key` and `retry_of` go on the new run (app.retry of a scheduled run). A retry is
        ordered with every other transaction that makes one; with `once` (retry_many), a run
        retried before (by anyone, also at the same moment) is not retried: TriggerRefused."""

    @abc.abstractmethod
    def retry_source(self, run_id: int) -> tuple[str | None, str | None] | None:
        """(key, backoff) of a run, for a retry that keeps them; None if there is no such run."""

    @abc.abstractmethod
    def prune_workers(self, lost_after: float, older_than: float) -> int:
        """Mark workers not seen for `lost_after` seconds `lost`; delete stopped or lost
        workers not seen for `older_than` seconds. Returns how many were deleted."""

    @abc.abstractmethod
    def mark_plan_error(self, due: DueSchedule, error: str) -> bool:
        """Record why `due` cannot be planned and stop it being due (next_run_at NULL), if its
        next_run_at is still `due.next_run_at`. Any later write giving it a next_run_at
        (update, resume, changed code definition) clears the error."""

    @abc.abstractmethod
    def get_schedule(self, name: str) -> ScheduleInfo | None: ...

    @abc.abstractmethod
    def get_schedule_def(self, name: str) -> ScheduleDef | None: ...

    @abc.abstractmethod
    def list_schedules(self, include_inactive: bool = False) -> list[ScheduleInfo]: ...

    # -- inspection and control ----------------------------------------------------------
    @abc.abstractmethod
    def get_run(self, run_id: int) -> Run | None: ...

    def handler_outcome(self, run_id: int) -> tuple[str, int | None] | None:
        """The run's (status, token), read back after a transactional handler's commit whose
        reply was lost (rota.transactional): once that transaction has ended. None if no run."""
        run = self.get_run(run_id)
        return None if run is None else (run.status, run.token)

    @abc.abstractmethod
    def list_runs(self, flt: RunFilter) -> list[Run]:
        """Newest first."""

    @abc.abstractmethod
    def count_by_status(self) -> dict[str, int]:
        """Exact counts of runs by status (statuses with no run left out)."""

    @abc.abstractmethod
    def run_counts(self) -> RunCounts:
        """Counts by status without scanning a big runs table: exact where the store keeps
        them cheaply, else estimates, named in `RunCounts.estimated`."""

    @abc.abstractmethod
    def run_rows(self, query: str, flt: RunFilter | None = None, run_id: int | None = None, **params: Any) -> list[Any]:
        """Raw rows of a `web_*` named query over rota_runs (decoded by rota.web, which shows
        an undecodable value as corrupt): filtered and ordered as `list_runs`, or one id."""

    def run_links(self, run_id: int) -> tuple[list[int], list[int]]:
        """(parents, dependents) of a run (`after=`), ids ascending."""
        return [], []

    def parent_results(self, run_id: int) -> dict[int, str | None]:
        """The stored (JSON) results of a run's parents, by parent id."""
        return {}

    def run_traceparent(self, run_id: int) -> str | None:
        """The trace context stored when the run was enqueued (rota.tracing), if any."""
        return None

    def web_rows(self, query: str, params: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
        """The rows of the `web_*` named query `query` once per parameter set, all in one read
        transaction (the dashboard's charts: one bounded, indexed query per bucket)."""
        raise NotImplementedError(f"{type(self).__name__} has no dashboard charts")

    @abc.abstractmethod
    def cancel(self, run_id: int, reason: str) -> str | None:
        """Pending -> cancelled at once; running -> cancel requested (the owner stops it).
        Returns the status after the call, None if no such run."""

    # -- workers -------------------------------------------------------------------------
    @abc.abstractmethod
    def register_worker(
        self,
        worker_id: str,
        host: str,
        pid: int,
        concurrency: int,
        queues: Sequence[str] | None,
        lease: float | None = None,
    ) -> None:
        """The worker's registry row, with its own lease (which the listings judge its liveness
        by; None: judged by the viewer's, as a worker of a release before schema 20), in one
        statement: no row is ever left without the lease its worker runs with. Registering
        again (after an outage) sets the state running, the heartbeat and the lease."""

    @abc.abstractmethod
    def worker_seen(self, worker_id: str, state: str, stuck: int = 0) -> None:
        """Record that the worker is alive, its state and its number of stuck handler threads."""

    def database_started(self) -> datetime | None:
        """When the database server started (None where there is no server, e.g. SQLite):
        the rescue rule gives owners a lease after a restart before their runs are rescued."""
        return None

    @abc.abstractmethod
    def list_workers(self, stale_after: float) -> list[WorkerInfo]: ...

    # -- named locks ---------------------------------------------------------------------
    @abc.abstractmethod
    def lock_acquire(self, name: str, owner: str, ttl: float) -> int | None:
        """Take the lock if free or expired; return the new fencing token (one more than
        any token ever issued for that name) or None."""

    @abc.abstractmethod
    def lock_renew(self, name: str, owner: str, token: int, ttl: float) -> bool:
        """Extend if (owner, token) still holds an unexpired lease."""

    @abc.abstractmethod
    def lock_release(self, name: str, owner: str, token: int) -> bool:
        """Release if (owner, token) still holds it; a stale holder's release is a no-op."""

    @abc.abstractmethod
    def list_locks(self) -> list[LockInfo]: ...

    # -- paused queues and declared tasks (schema 21) ---------------------------------------
    def set_queue_paused(self, queue: str, paused: bool, by: str | None = None) -> None:
        """Pause (every claim skips its runs) or resume a queue, fleet-wide."""
        raise NotImplementedError

    def list_queues(self) -> list[QueueInfo]:
        """The queues with active runs or paused, by name."""
        raise NotImplementedError

    def set_schedule_notify_on(self, name: str, notify_on: str | None) -> None:
        """Store a schedule's notify_on words (JSON text), or None."""
        raise NotImplementedError

    def stored_notify_on(self) -> list[tuple[str, Any]]:
        """(name, JSON text) of the active schedules with a stored notify_on."""
        raise NotImplementedError

    def declare_tasks(self, tasks: Sequence[str]) -> None:
        """Record the names of the tasks a worker declares (at its start)."""
        raise NotImplementedError

    def declared_tasks(self) -> list[str]:
        """Every task name a worker has declared."""
        raise NotImplementedError

    # -- dashboard sign-outs (rota.web.sessions) ------------------------------------------
    @abc.abstractmethod
    def signout_add(self, nonce: str, expires_at: int, at: float) -> None:
        """Remember that the session `nonce` signed out, until `expires_at`; forget the
        sign-outs expired at `at` (both in the dashboard's Unix seconds)."""

    @abc.abstractmethod
    def signed_out(self, nonce: str, at: float) -> bool: ...

    # -- retention -----------------------------------------------------------------------
    def prune(self, status: str, older_than: float, limit: int) -> int:
        """Delete up to `limit` runs in a final `status` finished more than `older_than`
        seconds ago; return how many."""
        return self.prune_from(status, older_than, limit, 0)[0]

    @abc.abstractmethod
    def prune_from(self, status: str, older_than: float, limit: int, after: float) -> tuple[int, float]:
        """`prune` of the runs that finished at or after `after` (Unix seconds), oldest finish
        first: how many, and where the next statement of the pass goes on (`after` if none
        was deleted). No statement walks again over the runs the pass deleted (on PostgreSQL
        their dead index entries stay until VACUUM: a statement from the oldest run each time
        made pruning quadratic)."""

    def move_history(self, limit: int) -> int:
        """Move up to `limit` succeeded runs of no schedule that a finish left among the
        active ones (an earlier schema's, a transactional handler's) to the history; return
        how many. Only PostgreSQL keeps a history table (schema 17): elsewhere, nothing."""
        return 0

    @abc.abstractmethod
    def stats(self) -> dict[str, Any]:
        """`run_stats(self.run_counts())` and a redacted database label."""
