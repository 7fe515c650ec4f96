"""Misfire and overlap policies, and the plan of which missed ticks run or are skipped."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from rota.errors import ConfigurationError, one_of, shown

from ._units import _US, _rough_duration, _seconds_number, _utc
from .jitter import jitter_boundary
from .triggers import IntervalTrigger, Trigger

MISFIRE_POLICIES = ("coalesce", "all", "skip")
OVERLAP_POLICIES = ("skip", "queue", "concurrent", "replace")


def check_misfire(word: str) -> str:
    """`word` if it is a misfire policy, else a ConfigurationError listing the valid ones."""
    if word not in MISFIRE_POLICIES:
        raise one_of(word, MISFIRE_POLICIES, "misfire policy")
    return word


def check_overlap(word: str) -> str:
    """`word` if it is an overlap policy, else a ConfigurationError listing the valid ones."""
    if word not in OVERLAP_POLICIES:
        raise one_of(word, OVERLAP_POLICIES, "overlap policy")
    return word


@dataclass(frozen=True)
class TickPlan:
    """What to do with a schedule's due ticks; all times are aware UTC.

    `skipped_more_exact` is False only when a cron schedule missed so many ticks that
    counting stopped (see plan_ticks): `skipped_more` is then a lower bound.
    """

    run: tuple[datetime, ...]
    skipped: tuple[tuple[datetime, str], ...]
    skipped_more: int
    next_run_at: datetime
    skipped_more_exact: bool = True


COUNT_BOUND_PER_LIMIT = 20
TICK_ROWS = 1000  # the default `limit`: ticks planned, and skipped rows written, per catch-up


def plan_ticks(
    trigger: Trigger,
    next_run_at: datetime,
    now: datetime,
    *,
    misfire: str,
    grace: timedelta,
    limit: int = TICK_ROWS,
    jitter: timedelta | None = None,  # missed then means: due (tick + offset) before now - grace
    seed: str = "",  # with jitter: the schedule's name, hashed into each tick's offset
) -> TickPlan:
    """Decide which due ticks of a schedule run, which are skipped, and the next fire time.

    Deterministic: every worker computes the same plan from the same inputs. The due ticks
    are `next_run_at` itself (a tick even when it is off the trigger's grid, as for
    run_immediately) and then the trigger's fire times up to and including `now`. A tick is
    missed when ``now - tick > grace``; exactly `grace` late is on time. On-time ticks run.
    Missed ticks:

    - "all": run, oldest first.
    - "skip": recorded as skipped ("missed by 2h 03m (misfire=skip, grace 60s)").
    - "coalesce": if an on-time tick runs, all are skipped; else the newest missed tick runs
      and the older ones are skipped as coalesced into it.

    Bounded work: at most `limit` ticks go in `run`; when more are due, `next_run_at` is the
    tick after the last one planned (it is then <= now, and the next call carries on). At
    most `limit` skipped ticks are listed (the oldest); the rest are counted in
    `skipped_more` without being built. For an IntervalTrigger that count is arithmetic and
    exact. For a cron trigger it is counted by iteration up to ``COUNT_BOUND_PER_LIMIT *
    limit`` further ticks; past that, counting stops, the plan jumps to the first tick at or
    after ``now - grace``, `skipped_more` is a lower bound and `skipped_more_exact` is False.
    Otherwise the returned `next_run_at` is after `now`.
    """
    first = _utc(next_run_at, "next_run_at")
    now = _utc(now, "now")
    policy = check_misfire(misfire)
    if not isinstance(grace, timedelta) or grace < timedelta(0):
        raise ConfigurationError(f"misfire grace must be a timedelta >= 0, got {shown(grace)}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive integer, got {limit!r}")
    if first > now:
        return TickPlan(run=(), skipped=(), skipped_more=0, next_run_at=first)
    if policy == "all":
        run, following = _collect(trigger, first, now, limit)
        return TickPlan(run=tuple(run), skipped=(), skipped_more=0, next_run_at=following)
    missed = _scan_missed(trigger, first, jitter_boundary(trigger, seed, first, now - grace, jitter), limit)
    run, following = _collect(trigger, missed.resume, now, limit)
    if policy == "skip":
        return _plan_skip(missed, run, following, now, grace)
    return _plan_coalesce(missed, run, following)


def tick_ahead(next_run_at: datetime, now: datetime, lead: timedelta) -> datetime | None:
    """The tick to materialize before it comes: `next_run_at` (as `plan_ticks` left it)
    when it is after `now` and at most `lead` ahead, else None. The schedule's next fire
    time after it is ``trigger.next_after(tick)``. A tick in the future is never a misfire:
    the misfire plan is made with the real `now`, and this only looks past it."""
    tick, now = _utc(next_run_at, "next_run_at"), _utc(now, "now")
    if lead <= timedelta(0) or not now < tick <= now + lead:
        return None
    return tick


@dataclass
class _Missed:
    """The missed ticks of one plan: the oldest ones listed, the rest only counted."""

    listed: list[datetime]
    more: int  # missed ticks after `listed` (a lower bound when not exact)
    exact: bool
    newest: datetime | None  # the newest missed tick
    resume: datetime  # the first tick at or after the grace boundary


def _collect(trigger: Trigger, first: datetime, now: datetime, limit: int) -> tuple[list[datetime], datetime]:
    """Ticks from `first` up to `now` (at most `limit`) and the tick that follows them."""
    ticks = trigger.ticks_after(first)
    run: list[datetime] = []
    tick = first
    while tick <= now and len(run) < limit:
        run.append(tick)
        tick = next(ticks)
    return run, tick


def _scan_missed(trigger: Trigger, first: datetime, boundary: datetime, limit: int) -> _Missed:
    """The ticks from `first` that are before `boundary`, listing at most `limit`."""
    ticks = trigger.ticks_after(first)
    listed: list[datetime] = []
    tick = first
    while tick < boundary and len(listed) < limit:
        listed.append(tick)
        tick = next(ticks)
    if tick >= boundary:
        return _Missed(listed, 0, True, listed[-1] if listed else None, tick)
    if isinstance(trigger, IntervalTrigger):
        return _count_on_grid(trigger, listed, tick, boundary)
    return _count_by_walking(trigger, listed, ticks, tick, boundary, COUNT_BOUND_PER_LIMIT * limit)


def _count_on_grid(trigger: IntervalTrigger, listed: list[datetime], tick: datetime, boundary: datetime) -> _Missed:
    """Count the grid ticks from `tick` (on the grid, missed) to `boundary` arithmetically."""
    resume_index = trigger.index_at_or_after(boundary)
    more = resume_index - trigger.index_after(tick) + 1
    return _Missed(listed, more, True, trigger.tick(resume_index - 1), trigger.tick(resume_index))


def _count_by_walking(
    trigger: Trigger,
    listed: list[datetime],
    ticks: Iterator[datetime],
    tick: datetime,
    boundary: datetime,
    bound: int,
) -> _Missed:
    """Count missed ticks one by one up to `bound`, then jump to the boundary."""
    counted, last = 0, tick
    while tick < boundary and counted < bound:
        counted, last = counted + 1, tick
        tick = next(ticks)
    if tick >= boundary:
        return _Missed(listed, counted, True, last, tick)
    resume = trigger.next_after(boundary - _US)  # ticks are whole seconds: first >= boundary
    newest = _newest_before(trigger, boundary, tick)
    # `tick` is missed and uncounted; `newest` is another one unless it is `tick` itself.
    exact = newest == tick
    return _Missed(listed, counted + (1 if exact else 2), exact, newest, resume)


def _newest_before(trigger: Trigger, boundary: datetime, known: datetime) -> datetime:
    """The newest tick before `boundary`, given a tick `known` before it.

    Looks back over doubling windows (1 min, 2 min, 4 min...), never before `known`, so the
    work is logarithmic in the distance plus the ticks in the last window.
    """
    span = timedelta(minutes=1)
    while True:
        start = max(boundary - span, known)
        newest = None
        for tick in trigger.ticks_after(start - _US):
            if tick >= boundary:
                break
            newest = tick
        if newest is not None:
            return newest
        span *= 2


def _skip_reason(tick: datetime, now: datetime, grace: timedelta) -> str:
    return f"missed by {_rough_duration(now - tick)} (misfire=skip, grace {_seconds_number(grace)}s)"


COALESCED = "coalesced (misfire=coalesce): a later tick runs"


def _plan_skip(missed: _Missed, run: list[datetime], following: datetime, now: datetime, grace: timedelta) -> TickPlan:
    skipped = tuple((tick, _skip_reason(tick, now, grace)) for tick in missed.listed)
    return TickPlan(tuple(run), skipped, missed.more, following, missed.exact)


def judge_unclaimed(tick: datetime, now: datetime, *, misfire: str, grace: timedelta, later_due: bool) -> str | None:
    """A run made ahead of `tick` that no worker claimed by ``tick + grace``, judged at `now`
    as `plan_ticks` judges that tick had it been made now: the reason it is skipped, or
    None when it runs. `later_due`: a later tick of the schedule is due by `now` (planned
    or still to plan), so "coalesce" runs that one instead. Within the grace (it may have
    grown since the run was made), or under "all", it runs."""
    tick, now = _utc(tick, "tick"), _utc(now, "now")
    policy = check_misfire(misfire)
    if policy == "all" or now - tick <= grace:
        return None
    if policy == "skip":
        return _skip_reason(tick, now, grace)
    return COALESCED if later_due else None


def _plan_coalesce(missed: _Missed, run: list[datetime], following: datetime) -> TickPlan:
    if run or missed.newest is None:
        reason = COALESCED
        skipped = tuple((tick, reason) for tick in missed.listed)
        return TickPlan(tuple(run), skipped, missed.more, following, missed.exact)
    newest = missed.newest
    reason = f"coalesced into the run for {newest.isoformat()}"
    older = [tick for tick in missed.listed if tick != newest]
    more = missed.more - 1 if missed.more else 0
    skipped = tuple((tick, reason) for tick in older)
    return TickPlan((newest,), skipped, more, following, missed.exact)
