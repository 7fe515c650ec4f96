"""Prefetch: runs claimed a little ahead of free slots, started locally as slots free.

With a backlog of short runs, a worker whose claim waits for a free slot leaves that slot
idle for a round trip each time, and small claims cost a statement per run or two. So the
claimer may hold some runs more than it has slots: claimed like any other (status running,
a token, a lease renewed by the heartbeat like a running run's), not started yet. When a
handler ends, the loop starts the next held run at once, without a round trip; the poll
loop tops the buffer up in the background, in batches of half of it (taking the finished
outcomes along, see Store.finish_and_claim).

Bounds, and fairness across workers. A worker holds only what it expects to start within
WINDOW seconds (the hold horizon) at the handlers' current pace, and never more than
`limit` (default `default_limit`: the concurrency, at least 200). The pace is the rate at
which slots free: each running handler is expected to take the recent mean duration, or
its age once it runs longer than that (so a switch to long handlers shows at once, while
they run, not only when they end). When the pace drops below what the held runs need, the
claimer hands the excess back (the lowest in start order first) for another worker to take
now (Claimer.trim). Only while there is a backlog (the last claim got all it asked for).
So a held run waits some milliseconds, far less than an idle worker's poll interval: no
other worker would have run it sooner. Long handlers are never claimed ahead (for 5 slots,
none once runs take 100 ms), and none before a handler has ended (unknown durations).

Order. Held runs start in the claim's order, priority DESC, due_at, id (a run claimed later
with a higher priority goes ahead of those held), so a higher-priority run waits behind
held ones for at most the horizon (the buffer is topped up, in claim order, before it
drains).

An idle worker also claims, held, the runs due within CLAIM_AHEAD (20 ms) just before their
time (Claimer.claim_ahead): each waits here for its due time (`not_before`), is never handed
back as excess, and starts then on the worker's clock, without the claim's round trip.

A held run is never started once the worker stops claiming (shutdown hands it back at once
without counting an attempt), once its cancellation is requested (it is recorded
cancelled; a wake-up saying so is confirmed with the database first, as a NOTIFY does not
say which schema's run it names), once its lease is lost (dropped), nor while its lease may have run out (no
renewal came through for a lease, e.g. during an outage: it waits for the heartbeat).
A held run shows as held (`started_at` empty, no attempt counted) until it starts here;
its start is written with the worker's next write (rota/lifecycle.py). Killed with -9, a
worker's held runs are rescued when their lease expires: pending again, no attempt counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import ConfigurationError
from ..stores.base import Claimed

# The default cap on runs held (with more slots: the concurrency). At W7's pace with 5 slots
# (about 4,000 short runs a second) the horizon holds about 80, claimed 40 at a time: 50 capped
# that at batches of 25, and PostgreSQL pays a commit (an fsync) and a statement start per batch.
FEWEST_HELD = 200
WINDOW = 0.02  # the hold horizon: seconds until a held run starts, at the current pace, at most
_WEIGHT = 0.2  # of the newest duration in the running mean


def start_order(claim: Claimed) -> tuple[int, float, int]:
    """The order held runs start in: the claim's, priority DESC, due_at, id."""
    return (-claim.priority, claim.due, claim.id)


class Prefetch:
    """The held runs, in start order, and whether more may be held."""

    def __init__(self, limit: int, slots: int = 1) -> None:
        self.limit = limit
        self.slots = slots
        self.held: dict[int, tuple[Claimed, float]] = {}  # run id -> (claim, lease known until)
        self.backlog = False  # the last claim got all it asked for
        self.mean: float | None = None  # running mean of recent handler durations (seconds)
        self.running: Mapping[int, Any] = {}  # the handlers running, oldest first (Executors.inflight)
        self.claiming: Callable[[], bool] = lambda: True
        self.doubted: set[int] = set()  # a wake-up said cancelled: not started until confirmed
        # runs claimed just before their due time (Claimer.claim_ahead): not started before
        # then (monotonic), and never handed back as excess
        self.not_before: dict[int, float] = {}

    def size(self) -> int:
        """How many runs to hold: those the slots start within WINDOW at the current pace,
        at most `limit`; none before a handler has ended (durations unknown)."""
        mean = self.mean
        if self.limit <= 0 or mean is None:
            return 0
        return min(self.limit, int(WINDOW * self.pace(mean)))

    def pace(self, mean: float) -> float:
        """Runs per second the slots are expected to start now: each slot frees after the
        mean duration, or, once its handler runs longer than that, after the handler's age
        (re-estimated while handlers run, not only when they end). Oldest first: the loop
        stops at the first handler younger than the mean (almost always the first)."""
        mean = max(mean, 1e-6)
        now = time.monotonic()
        slow, rate = 0, 0.0
        for active in self.running.values():
            age = now - active.started
            if age <= mean:
                break
            slow += 1
            rate += 1.0 / age
        return rate + max(0, self.slots - slow) / mean

    def room(self) -> int:
        """How many more runs may be claimed ahead now."""
        if not self.backlog or not self.claiming():
            return 0
        return max(0, self.size() - len(self.held))  # (the hot path: the pace once)

    def active(self) -> bool:
        return self.backlog and self.size() > 0 and self.claiming()

    def ran(self, seconds: float) -> None:
        """A handler ended after `seconds`."""
        mean = self.mean
        self.mean = seconds if mean is None else mean + _WEIGHT * (seconds - mean)

    def hold(self, claim: Claimed, deadline: float) -> None:
        """Hold a claimed run; its lease is known to last until `deadline` (monotonic)."""
        self.hold_all((claim,), deadline)

    def hold_all(self, claims: Iterable[Claimed], deadline: float) -> None:
        """Hold claimed runs (leases known to last until `deadline`), merged with those held
        in start order: a higher-priority run claimed later starts before them."""
        held = self.held
        last = start_order(next(reversed(held.values()))[0]) if held else None
        ordered = True  # each new run goes after those held (a claim's runs come in start order)
        for claim in claims:
            if claim.id in held:  # (kept where it was: its place may no longer be its order)
                ordered = False
            held[claim.id] = (claim, deadline)
            if ordered:
                order = start_order(claim)
                ordered = last is None or order > last
                last = order
        if not ordered:
            self.held = dict(sorted(held.items(), key=lambda item: start_order(item[1][0])))

    def hold_ahead(self, claims: Iterable[Claimed], deadline: float, starts: Mapping[int, float]) -> None:
        """Hold runs claimed before their due time; each starts at `starts[id]` (monotonic)
        at the earliest."""
        self.not_before.update(starts)
        self.hold_all(claims, deadline)

    def next_ahead(self, now: float) -> float | None:
        """The soonest time after `now` (monotonic) that a run held for its due time may
        start; None if there is none (those whose time came start when a slot is free)."""
        return min((at for at in self.not_before.values() if at > now), default=None)

    def renewed(self, alive: set[int], deadline: float) -> None:
        """The heartbeat renewed the leases of `alive` until `deadline` (monotonic)."""
        for run_id in alive & self.held.keys():
            self.held[run_id] = (self.held[run_id][0], deadline)

    def next(self, now: float | None = None) -> Claimed | None:
        """The first held run (start order) whose lease is known to hold, to start now; None if there is
        none, or the worker is stopping. A run whose lease may have run out (no renewal
        came through, e.g. during an outage) waits for the heartbeat: kept or dropped."""
        if not self.held or not self.claiming():
            return None
        if now is None:
            now = time.monotonic()
        not_before = self.not_before
        for run_id, (claim, deadline) in self.held.items():
            if deadline > now and run_id not in self.doubted and not_before.get(run_id, 0.0) <= now:
                del self.held[run_id]
                not_before.pop(run_id, None)
                return claim
        return None

    def take_excess(self) -> list[tuple[Claimed, float]]:
        """The held runs the current pace would not start within WINDOW (the last in start
        order), no longer held: to hand back (see Claimer.trim)."""
        spare = [run_id for run_id in self.held if run_id not in self.not_before]
        extra = len(spare) - self.size()
        if extra <= 0:
            return []
        return [self.held.pop(run_id) for run_id in spare[-extra:]]

    def rehold(self, entries: list[tuple[Claimed, float]]) -> None:
        """Hold again what take_excess gave (the hand-back could not be written)."""
        for claim, deadline in entries:
            self.hold_all((claim,), deadline)

    def get(self, run_id: int) -> Claimed | None:
        entry = self.held.get(run_id)
        return entry[0] if entry is not None else None

    def drop(self, run_id: int) -> Claimed | None:
        self.not_before.pop(run_id, None)
        entry = self.held.pop(run_id, None)
        return entry[0] if entry is not None else None

    def take_all(self) -> list[Claimed]:
        held, self.held = [claim for claim, _ in self.held.values()], {}
        self.not_before.clear()
        return held

    def tokens(self) -> list[tuple[int, int]]:
        """(run id, token) of every held run: their leases are renewed."""
        return [(c.id, c.token) for c, _ in self.held.values()]


def default_limit(concurrency: int) -> int:
    """The default bound on runs held ahead: enough for a batch of short runs per claim.
    The hold horizon (WINDOW) decides how many are held; this only caps it."""
    return max(concurrency, FEWEST_HELD)


def prefetch_limit(value: int) -> int:
    """A `prefetch` setting: how many runs a worker may hold beyond its slots (0: none)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigurationError(f"prefetch must be an integer >= 0 (0 turns it off), got {value!r}")
    return value
