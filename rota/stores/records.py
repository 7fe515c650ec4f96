"""The records the worker's hot path passes to and from a store: a run to insert, a claimed
run, an attempt's outcome, a rescued run, the poll's state, a listing's filter and the run
counts (re-exported by rota.stores.base)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .. import quarantine
from ..models import STATUSES


@dataclass(slots=True)
class NewRun:
    """A run to insert. `scheduled_for` None means now + `delay` seconds on the store's clock."""

    task: str
    args: str = "[]"
    kwargs: str = "{}"
    queue: str = "default"
    priority: int = 0
    scheduled_for: datetime | None = None
    delay: float = 0.0
    key: str | None = None
    max_attempts: int = 1
    timeout: float | None = None
    backoff: str | None = None
    schedule: str | None = None
    tick: datetime | None = None
    exclusive: bool = False
    held: bool = False
    status: str = "pending"
    error: str | None = None
    retry_of: int | None = None
    # `key` + `unique_for` seconds: the key's run created within that window (not cancelled)
    # is returned instead of a new one. `after`: ids of runs that must succeed first.
    unique_for: float | None = None
    after: tuple[int, ...] = ()
    due_at: datetime | None = None  # when it may start, if not scheduled_for (a jittered tick)
    limit_name: str | None = None  # rota.Limit: the limit's name and this run's key
    limit_key: str | None = None
    rate_name: str | None = None  # rota.Rate: likewise
    rate_key: str | None = None
    # The limit and rate above come from the task's declaration in this process (none may be
    # set: the task has neither). False: the store keys the run from the stored declaration.
    flow_known: bool = False
    # A schedule's tick: if its task's code cannot key it (a `by=` callable raising on the
    # stored arguments), it is recorded skipped with the error instead of taking the empty key.
    skip_unkeyed: bool = False
    # The W3C traceparent of the span current at enqueue (rota.tracing), stored with the run.
    traceparent: str | None = None


@dataclass(slots=True)
class Claimed:
    """What a worker needs to execute a claimed run."""

    id: int
    task: str
    args: str
    kwargs: str
    attempt: int
    max_attempts: int
    token: int
    timeout: float | None
    backoff: str | None
    schedule: str | None
    scheduled_for: datetime
    started_at: datetime | None  # None: held (claimed, not started; the attempt not counted yet)
    lease_until: datetime
    priority: int = 0  # with `due`, the order held runs start in (the claim's order)
    due: float = 0.0  # due_at, Unix seconds
    # whether the run had saved steps when claimed (rota.durable): False, its handler's first
    # step reads none (no one else saves for it while this claim's token holds it)
    steps: bool = True
    # why the stored row cannot be worked (rota.quarantine): the worker fails it at once,
    # without running it; its other fields are then placeholders
    damaged: str | None = None
    default_timeout: bool = False  # `timeout` is the worker's default (the run set none)

    @property
    def held(self) -> bool:
        return self.started_at is None


#: The largest attempt a claim counts (PostgreSQL's integer column; rota never writes more on
#: either store): a run at it is set aside as damaged, and the claim's arithmetic skips it.
ATTEMPT_MAX = 2**31 - 1
_EPOCH = datetime.fromtimestamp(0, UTC)


def claimed_rows(rows: list[Any], build: Callable[[Any], Claimed]) -> list[Claimed]:
    """Claimed runs in id order, each decoded on its own by `build` and checked: a row that
    does not decode or holds a value no release writes is returned as a placeholder with
    `damaged` set (the worker fails it as damaged), so it never costs the other runs of its
    batch their claim."""
    rows.sort(key=lambda r: r[0])
    claims: list[Claimed] = []
    for row in rows:
        try:
            claim = build(row)
            reason = _damage(claim)
        except quarantine.UNDECODABLE as exc:
            claim, reason = None, quarantine.describe(exc)
        if reason is None and claim is not None:
            claims.append(claim)
        else:
            claims.append(_set_aside(row, reason or "undecodable"))
    return claims


def typed_sound(claims: list[Claimed]) -> bool:
    """Whether every claim of a batch decoded from typed columns (PostgreSQL's: text, integer,
    double precision and timestamptz, NOT NULL where rota needs a value) holds only values a
    release writes: the checks of `_damage` that such columns leave open, inline, in one
    pass over the batch (the hot path: a per-row check cost a tenth of a no-op run's worker
    CPU, issue 41). False (or a value of a type the columns cannot hold): look row by row
    (claimed_rows), which names the damage."""
    inf = _INF
    try:
        for c in claims:
            t = c.timeout
            if not (
                0 <= c.attempt < ATTEMPT_MAX
                and (t is None or 0 < t < inf)  # (NaN fails)
                and -inf < c.due < inf
                and type(c.scheduled_for) is datetime  # (not a time out of Python's range)
                and type(c.lease_until) is datetime
                and (c.started_at is None or type(c.started_at) is datetime)
            ):
                return False
    except TypeError:  # a value no such column holds: the row-by-row checks say which
        return False
    return True


def claim_of_unix(r: Any) -> Claimed:
    """A claimed row whose times are Unix seconds (SQLite's), as Claimed."""
    ts = datetime.fromtimestamp
    try:
        return Claimed(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], ts(r[10], UTC),
                       None if r[11] is None else ts(r[11], UTC), ts(r[12], UTC), r[13], r[14], *r[15:16])  # (steps: schema 22)  # fmt: skip
    except quarantine.UNDECODABLE:  # name the time that does not decode
        for i, field in ((10, "scheduled_for"), (11, "started_at"), (12, "lease_until")):
            try:
                _ = r[i] is None or ts(r[i], UTC)
            except quarantine.UNDECODABLE as exc:
                raise ValueError(f"{field} {r[i]!r} is not a time rota can read ({quarantine.describe(exc)})") from None
        raise


_INF = math.inf


def _damage(c: Claimed) -> str | None:
    """What is wrong with a claimed run's stored values, or None. The hot path: one expression
    for the values every release writes (a NaN timeout fails `0 < t < inf`), else _diagnose."""
    t = c.timeout
    if (
        type(c.attempt) is int
        and 0 <= c.attempt < ATTEMPT_MAX
        and type(c.max_attempts) is int
        and type(c.priority) is int
        and type(c.token) is int
        and (t is None or (type(t) is float and 0 < t < _INF))
        and type(c.task) is str
        and type(c.args) is str
        and type(c.kwargs) is str
        and type(c.scheduled_for) is datetime
        and type(c.lease_until) is datetime
        and (c.started_at is None or type(c.started_at) is datetime)
        and type(c.due) is float
        and -_INF < c.due < _INF
    ):
        return None
    return _diagnose(c)


def _diagnose(c: Claimed) -> str | None:
    """What is wrong with a claimed run's stored values (None: nothing, after all)."""
    if type(c.attempt) is not int or not 0 <= c.attempt < ATTEMPT_MAX:
        return f"attempt {c.attempt!r} is not an integer from 0 to {ATTEMPT_MAX - 1}"
    if type(c.max_attempts) is not int or type(c.priority) is not int or type(c.token) is not int:
        return f"max_attempts {c.max_attempts!r}, priority {c.priority!r} or token {c.token!r} is not an integer"
    timeout = c.timeout
    if timeout is not None and (not isinstance(timeout, (int, float)) or not timeout > 0 or math.isinf(timeout)):
        return f"timeout {timeout!r} is not a positive number of seconds"  # NaN too (it broke the loop's timers)
    for field in ("task", "args", "kwargs"):
        if type(getattr(c, field)) is not str:
            return f"{field} {getattr(c, field)!r} is not text"
    if not isinstance(c.scheduled_for, datetime) or not isinstance(c.lease_until, datetime):
        return f"scheduled_for {str(c.scheduled_for)!r} is not a time rota can read"
    if c.started_at is not None and not isinstance(c.started_at, datetime):
        return f"started_at {str(c.started_at)!r} is not a time rota can read"
    if not isinstance(c.due, (int, float)) or not math.isfinite(c.due):
        return f"due_at {c.due!r} is not a time rota can read"
    return None


def _set_aside(row: Any, reason: str) -> Claimed:
    """A damaged claimed row as a placeholder the worker fails without running it."""
    task = row[1] if isinstance(row[1], str) else "?"
    schedule = row[9] if isinstance(row[9], str) else None
    return Claimed(row[0], task, "[]", "{}", 0, 1, row[6], None, None, schedule, _EPOCH, None, _EPOCH, damaged=reason)


REFUSED = "refused"  # Outcome.status of a run given back by a worker that lacks its task
PARKED = "parked"  # Outcome.status of a run that parks (rota/durable.py): result [kind, name, since, until], retry_in: its wait
OWN_STATEMENT = (REFUSED, PARKED)  # Outcome statuses written by statements of their own
#: A refused run fails once it has been refused for this long since its first refusal, on the
#: database's clock: no worker that registers its task took it meanwhile.
UNKNOWN_TASK_GRACE = 600.0
#: The delay before a refused run is due again: half the time since its first refusal, within
#: these bounds (seconds).
REFUSE_DELAY = (1.0, 60.0)


@dataclass(slots=True)
class Outcome:
    """The end of one attempt, written by `finish` only if (id, token) still holds the run.

    status: succeeded | failed | cancelled, or pending for a retry after `retry_in` seconds,
    or REFUSED: a run of a task the worker does not register, given back (no attempt; the
    `refuse` transition), `error` saying why; the store sets `written_status` to what it
    wrote: pending, or failed (refused for longer than UNKNOWN_TASK_GRACE), or cancelled.
    `history` is a JSON object describing the attempt, appended to the run's history (set
    for every attempt that did not succeed, so no attempt's error is ever overwritten).
    `started`: a held run whose handler started `started` seconds ago and whose start was
    not written yet: the finish records the start too (the attempt counted, started_at).
    """

    id: int
    token: int
    status: str
    result: str | None = None
    error: str | None = None
    retry_in: float = 0.0
    history: str | None = None
    started: float | None = None
    written_status: str | None = None
    # the handler's last step's checkpoint (rota.durable: a step it returned at once), as
    # save_steps rows: written in the finish's transaction, before the outcome
    steps: list[dict[str, Any]] | None = None


@dataclass(slots=True)
class Rescued:
    id: int
    task: str
    status: str
    owner: str | None
    message: str
    damaged: bool = False  # a lease no worker can have granted: ended failed as damaged (lease_damaged)


def rescued_rows(rows: list[Any], damaged: bool = False) -> list[Rescued]:
    """The runs a rescue (or lease_damaged: `damaged`) ended or gave back: (id, task, status,
    owner, error JSON) rows."""
    return [Rescued(r[0], r[1], r[2], r[3], str(json.loads(r[4])["message"]), damaged) for r in rows]


@dataclass(slots=True)
class PollState:
    now: datetime
    next_run_due: datetime | None
    next_schedule_due: datetime | None


__all__ = ["Claimed", "NewRun", "Outcome", "PollState", "Rescued"]


@dataclass(slots=True)
class RunFilter:
    status: str | None = None
    task: str | None = None
    schedule: str | None = None
    queue: str | None = None
    limit: int = 100
    before_id: int | None = None
    damaged: bool = False  # only the runs set aside as damaged (failed, error type DamagedRow)


#: What the stored error of a run set aside as damaged begins with (rota.quarantine.run_error
#: written by rota.serialization.simple_error): the `damaged` filter's LIKE pattern.
DAMAGED_ERROR_LIKE = '{"type":"DamagedRow",%'


@dataclass(slots=True)
class RunCounts:
    """Runs by status; `estimated` names the statuses whose figure is an estimate (from the
    database's planner statistics on a big table) rather than an exact count."""

    counts: dict[str, int]
    estimated: frozenset[str]


def run_stats(counts: RunCounts) -> dict[str, Any]:
    """The stats() shape of run counts: every status, and whether the figures are exact."""
    runs = dict.fromkeys(STATUSES, 0)
    runs.update(counts.counts)
    return {
        "runs": runs,
        "runs_counted": "estimated" if counts.estimated else "exact",
        "runs_estimated": sorted(counts.estimated),
    }
