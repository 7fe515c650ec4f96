"""Concurrency limits and rate limits, enforced by the database (rota.Limit, rota.Rate).

Design note
-----------
A run of a task with a limit or a rate carries its limit's name and resolved key
(`limit_name`, `limit_key`) and its rate's (`rate_name`, `rate_key`), set at enqueue. The
plain claim leaves such runs out (its partial index says `limit_name IS NULL AND rate_name
IS NULL`, so it never walks past them): a task without a limit or a rate takes no extra
lock or statement, and a backlog of waiting limited runs costs it nothing.

The limits and rates themselves (max, per) live in `rota_limits` and `rota_rates`, written
when a worker starts (`sync_flow`; the newest deploy wins). A store whose database has any
runs, while limited or rated runs were last seen due, one transaction: the outcomes it is
given (their slots freed first), the *flow claim* below, the plain claim for the rest and
the probe (on PostgreSQL pipelined: two round trips). Otherwise the plain claim's own
transaction ends with a probe (`flow_due`, one index probe, no extra round trip) that
switches the flow claim back on. Runs of limits may be claimed ahead (held): a held run is
`running`, so it counts against its limit; rated runs are only claimed into free slots
(their start is logged at the claim). The worker takes its queued outcomes along while
limited runs are due (`limits_due`); while due runs wait on full limits (`limits_wait`) a
run of its own that ends makes it claim again within a millisecond, and the due time it
learns after such a claim is the next one due later (`poll_after_claim`): it sleeps rather
than claims in a loop, and is woken by the freed slot (trigger NOTIFY, data_version, or its
own run ending). A claim that took every free slot of its limit keys counts as leaving the
rest waiting too, even when it got all it asked for (`_left_waiting`). While no run without
a limit is due either (`plain_due`: the plain claim got fewer than it asked for, or, asked
for none, a probe on its index found none), the worker holds no runs ahead (`limits_full`,
prefetch): a claim before one of its own runs ends would find nothing (measured: one such
empty round trip per cycle, W10 `limit=100` at 0.55x). Runs without a limit are still held
ahead while a limit is full.

Slots are not counted in a counter row: a limit key's running count is the number of its
runs whose status is `running` (an index holds just those). Every statement that ends or
returns a run (finish, hand-back, rescue, cancel of an active run, and any added later)
frees the slot by changing that run, once, under its token; a fenced-off late result
changes nothing and so frees nothing twice; kill -9 or a lost lease frees the slot when the
rescue changes the run. There is no counter to drift. On PostgreSQL a trigger NOTIFYs the
workers when a limited run stops running, so the next run of that key starts within a
wake-up (the two finish statements send it themselves, once per batch, and the trigger's
WHEN skips their rows: schema 0016); on SQLite the other processes see the write through
their data_version watch.

Rates are a sliding window over a log, `rota_rate_starts` (name, key, started_at on the
database clock): at most `max` starts in any `per` seconds; every claim of a rated run is a
start (retries count), taken back only when no handler started: the run is refused
(`refuse`), or its claim's reply was lost and its worker gives it back (`disown`); the log has
no run id, so one row of its key and start time goes. When a rate key
is full its due waiting runs get `due_at` = the time the window opens again (when the start
that fills it leaves the window), so every worker's ordinary "next run due at" sleep wakes
it then: no polling while runs wait on a rate. Old starts are pruned whenever the key is
claimed. (A GCRA "next allowed" timestamp would be
one row per key, but it enforces a smoothed rate, not "N in any window".)

The flow claim, in that transaction:
1. `flow_heads`: the limit and rate keys that have a due waiting run and room, ordered by
   their first run, the room of each counted only when its turn comes. The keys come from
   the waiting runs themselves by a loose index scan (one probe per distinct key, however
   many runs wait; no key table to keep or prune). After a claim that took as many keys as
   it may (many keys wait), `flow_heads_walk` first reads the keys of the first waiting runs
   in the claim's order (`rota_runs_gated_order`), and the loose scan only finds the keys
   beyond them when those were too few. On PostgreSQL each key is taken with an advisory
   *try*-lock, one at a time, until enough keys are held: a key another claimer holds is
   skipped, never waited for (no deadlock, and concurrent claimers share the keys, as SKIP
   LOCKED shares rows).
2. When every key taken is a limit key: `flow_take_limits` (PostgreSQL; one statement that
   starts after the locks were granted, so it sees every claim committed before) counts
   their free slots again and claims their first waiting runs. Otherwise, and on SQLite
   (one writer: no round trips, nothing changes meanwhile), step by step:
   `flow_room`, the free slots / room of the locked keys; for each key its first waiting
   runs (`flow_waiting_*`), kept while every key the run has (a run may have a limit and a
   rate) is locked and has room; `flow_take` claims them (`flow_started` logs the starts of
   rated ones); for each rate key now full, `flow_bump` moves its waiting runs' due time to
   the window's opening; `flow_prune` drops its starts that left the window.
Running counts go through an index scan that visits the rows (`count(r.id)`): it marks the
index entries of row versions gone as dead, where an index-only count would walk every run
that ever ran on the key until VACUUM (measured: a claim growing with the drain).
A full key never blocks others: its runs are simply not taken, and the rest are.
A tick made ahead whose misfire deadline passed while it waited is not taken either (the
`misfire_at` test of claim, in the statements that read each key's waiting runs: a filter
on rows they read anyway, the same index): the tick pass judges it by its misfire policy.
`flow_heads` and `flow_due` do not test the deadline: until the tick pass judges such a
tick, they still count it as due, so a claim may take its key and then take nothing from
it (the tick pass is woken at once, as the deadline passes, and ends that).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import DatabaseError
from ..base import Claimed
from ..flow_damage import limit_damage, rate_damage, report_damaged
from ..records import PARKED, PollState

# Keys taken per flow claim: a few more than the runs asked for (a full rate key is taken
# too, to push its runs' due time), at most _MAX_KEYS: on PostgreSQL each is an advisory
# lock held to the commit, and the server's lock table is shared (max_locks_per_transaction
# times max_connections: 6,400 by default). A claim that wants more takes the rest at the
# next one. The keys are looked for first among the first _WALK times as many waiting runs.
_EXTRA_KEYS, _MAX_KEYS, _WALK = 8, 256, 4
# How often a worker whose database had no limit or rate when it started asks again.
FLOW_RECHECK = 10.0
# A flow claim holds at most this many runs beyond the free slots, whatever the worker's
# prefetch cap: a held run of a limit takes one of the limit's slots that another worker
# could start now, so a 5-slot worker must not hold a Limit(100) whole for its own pace.
FLOW_HELD = 50


@dataclass(frozen=True, slots=True)
class LimitInfo:
    """A limit as stored, with its running and waiting runs (all keys; `max` is per key) and
    `keys_full`, its keys whose running runs fill `max` (the limit is full for those). `corrupt`
    names a stored field out of what a Limit can declare (rota.stores.flow_damage): its runs wait."""

    name: str
    max: int
    running: int
    waiting: int
    keys: int
    corrupt: tuple[str, ...] = ()
    keys_full: int = 0

    def to_json(self) -> dict[str, Any]:
        """The shape of `rota limits --json` and GET /api/limits."""
        return {"name": self.name, "max": self.max, "running": self.running, "waiting": self.waiting, "keys": self.keys,
                "keys_full": self.keys_full, "corrupt": list(self.corrupt)}  # fmt: skip


@dataclass(frozen=True, slots=True)
class RateInfo:
    """A rate as stored, with its starts in the current window and its waiting runs (all keys;
    `max` is per key), `keys_full`, its keys whose starts in the window reach `max` (`corrupt`,
    as LimitInfo's: a damaged max or per; its runs wait)."""

    name: str
    max: int
    per: float
    started: int
    waiting: int
    keys: int
    corrupt: tuple[str, ...] = ()
    keys_full: int = 0

    def to_json(self) -> dict[str, Any]:
        """The shape of `rota limits --json` and GET /api/limits (a per that is not a finite
        number, damaged, is null)."""
        per = self.per if math.isfinite(self.per) else None
        return {"name": self.name, "max": self.max, "per_seconds": per, "started_in_window": self.started,
                "waiting": self.waiting, "keys": self.keys, "keys_full": self.keys_full,
                "corrupt": list(self.corrupt)}  # fmt: skip


class FlowMixin:
    """The flow claim and the flow tables, for both SQL stores. The store supplies `_tx`,
    `_plain_claim`, `_plain_finish_and_claim`, `_flow_take` (the backend's token rule) and
    `_claimed_rows` (rows to `Claimed`)."""

    flow_active: bool = False  # set when the database has a limit or a rate
    flow_due: bool = True  # a limited or rated run was last seen due: claim those first
    # the last flow claim took fewer runs than it could: the due limited or rated runs left
    # wait for a slot (or for their window); see poll_after_claim
    flow_blocked: bool = False
    _flow_capped: bool = False  # the last flow claim took as many keys as it may
    # runs without a limit or a rate may still be due: the last claim's plain part got all it
    # asked for, or (when it was asked for none) the plain_due probe found one
    plain_due: bool = True
    # the last flow claim left runs due that it did not try (PostgreSQL's one-trip flow claim
    # sends no plain claim and leaves rate keys to the general path): claim again at once
    _again_now: bool = False
    one_trips = 0  # flow claims made in one round trip (PostgreSQL; tests and benchmarks read it)

    def sync_flow(self, limits: dict[str, int], rates: dict[str, tuple[int, float]]) -> bool:
        """Store the limits and rates the code declares (this deploy's values win); return
        whether the database has any (then claims look at limited and rated runs)."""
        with self._tx() as s:  # type: ignore[attr-defined]
            for name, max_ in sorted(limits.items()):
                s.q("flow_upsert_limit", name=name, max=max_)
            for name, (max_, per) in sorted(rates.items()):
                s.q("flow_rate_reopen", name=name, max=max_, per=per)  # before the old per is gone
                s.q("flow_upsert_rate", name=name, max=max_, per=per)
            active = int(s.q("flow_any")[0][0]) > 0
        self.flow_active = active
        return active

    def list_limits(self) -> list[LimitInfo]:
        with self._read() as s:  # type: ignore[attr-defined]
            rows = s.q("flow_limits")
        return [
            LimitInfo(str(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4]), limit_damage(r[1]), int(r[5]))
            for r in rows
        ]

    def list_rates(self) -> list[RateInfo]:
        with self._read() as s:  # type: ignore[attr-defined]
            rows = s.q("flow_rates")
        return [
            RateInfo(
                str(r[0]), int(r[1]), float(r[2]), int(r[3]), int(r[4]), int(r[5]), rate_damage(r[1], r[2]), int(r[6])
            )
            for r in rows
        ]

    def damaged_flow(self, *, report: bool = True) -> list[tuple[str, str, str]]:
        """The stored limits, rates and task specs that are damaged: (kind, name, reason),
        each also named once in the log (rota.quarantine) if `report`. A worker asks now and
        then; `rota limits` and /api/limits list the task specs."""
        with self._read() as s:  # type: ignore[attr-defined]
            rows = s.q("flow_damaged")
        return report_damaged(rows, report=report)

    def claim(
        self, owner: str, limit: int, queues: Sequence[str] | None, lease: float, start: int | None = None
    ) -> list[Claimed]:
        """While limited or rated runs were last seen due: the flow claim, then the plain
        claim and the probe, in one transaction. Otherwise the plain claim, which also
        probes whether any are due (in its own transaction: no extra round trip), so a
        database with limits costs tasks without one a probe, not a flow claim. The first
        `start` runs start (the free slots); the rest are held. Runs of limits may be held
        (a held run is `running`: it counts against its limit); rated runs are only claimed
        into free slots (their start is logged when they are claimed)."""
        if not self._flow_on():
            return self._plain_claim(owner, limit, queues, lease, start)  # type: ignore[attr-defined, no-any-return]
        return self.finish_and_claim([], owner, limit, queues, lease, start)[1]

    def finish_and_claim(
        self,
        outcomes: Sequence[Any],
        owner: str,
        limit: int,
        queues: Sequence[str] | None,
        lease: float,
        start: int | None = None,
    ) -> tuple[set[int], list[Claimed]]:
        if any(o.status == PARKED for o in outcomes):  # parked runs (rota/durable.py): written first
            parked = self.park_runs([o for o in outcomes if o.status == PARKED])  # type: ignore[attr-defined]
            rest = [o for o in outcomes if o.status != PARKED]
            written, got = self.finish_and_claim(rest, owner, limit, queues, lease, start)
            return written | parked, got
        if not self._flow_on():
            return self._plain_finish_and_claim(outcomes, owner, limit, queues, lease, start)  # type: ignore[attr-defined, no-any-return]
        free = limit if start is None else start
        self._again_now = False
        if self.flow_due:  # the outcomes free slots: written first, in the claim's transaction
            limit = min(limit, free + FLOW_HELD)  # (runs of limits held: FLOW_HELD at most)
            self._resolve_some()
            written, taken, got, self.flow_due, self.plain_due = self._flow_finish_and_claim(
                outcomes, owner, limit, queues, lease, free
            )
            self.flow_blocked = self._left_waiting(taken, limit)
            return written, got
        written, got, due = self._probed_finish_and_claim(outcomes, owner, limit, queues, lease, free)
        if limit > 0:
            self.plain_due = len(got) >= limit
        room = _room(limit - len(got), free, len(got))
        self.flow_blocked = False
        return written, got + self._after_probe(False, due, owner, room, queues, lease)

    def _left_waiting(self, taken: int, asked: int) -> bool:
        """Whether the flow claim that took `taken` of `asked` runs left the due limited or
        rated runs waiting for a slot: it took fewer than it asked for, or every free slot
        of its limit keys (a claim that fills a limit exactly asks the next one to wait for
        a slot too: another claim now would find it full). Not when it took as many keys as
        one claim may: more keys wait, with room."""
        if asked <= 0:  # nothing asked: nothing learnt
            return self.flow_blocked
        if self._flow_capped or self._again_now:
            return False
        return taken < asked or (self._flow_room is not None and taken >= self._flow_room)

    # the free slots of the limit keys the last flow claim took, as flow_heads saw them (None:
    # it took a rate key too)
    _flow_room: int | None = 0
    _flow_asked = 0.0  # when flow_any was last asked (monotonic; 0: not yet)

    def _flow_on(self) -> bool:
        """Whether the database has a limit or a rate. Set when a worker starts (sync_flow)
        and, while not, asked again every FLOW_RECHECK seconds: a worker started before the
        first limit was deployed takes limited runs (under their limits) from then on. Until
        then it leaves them alone (the plain claim never takes one)."""
        if self.flow_active:
            return True
        now = time.monotonic()
        if not self._flow_asked:
            self._flow_asked = now
        elif now >= self._flow_asked + FLOW_RECHECK:
            self._flow_asked = now
            try:
                with self._read() as s:  # type: ignore[attr-defined]
                    self.flow_active = int(s.q("flow_any")[0][0]) > 0
            except DatabaseError:  # an older schema (no rota_limits), or the database away
                pass
        return self.flow_active

    def claim_cut_short(self) -> bool:
        """The last claim took as many keys as one claim may while more were due, or left
        runs it did not try (`_again_now`): the runs it did not take are due now (not a sign
        that what is due was drained)."""
        return self.flow_active and ((self.flow_due and self._flow_capped) or self._again_now)

    def _after_probe(
        self, tried: bool, due: bool, owner: str, room: int, queues: Sequence[str] | None, lease: float
    ) -> list[Claimed]:
        """Remember whether limited or rated runs are due; if they are and this call has not
        looked at them yet, claim them into the room left."""
        self.flow_due = due
        if due and not tried and room > 0:
            return self.flow_claim(owner, room, queues, lease)
        return []

    def _probed_claim(
        self, owner: str, limit: int, queues: Sequence[str] | None, lease: float, start: int
    ) -> tuple[list[Claimed], bool]:
        _, got, due = self._probed_finish_and_claim([], owner, limit, queues, lease, start)
        return got, due

    def _probed_finish_and_claim(
        self, outcomes: Sequence[Any], owner: str, limit: int, queues: Sequence[str] | None, lease: float, start: int
    ) -> tuple[set[int], list[Claimed], bool]:
        raise NotImplementedError  # pragma: no cover - each backend's

    def flow_claim(
        self, owner: str, limit: int, queues: Sequence[str] | None, lease: float, start: int | None = None
    ) -> list[Claimed]:
        """Claim up to `limit` due limited or rated runs that their limits and rates allow;
        the first `start` (all if None) start, the rest are held (runs of limits only)."""
        if limit <= 0:
            return []
        self._resolve_some()
        names = None if queues is None else self._names(queues)  # type: ignore[attr-defined]
        with self._tx() as s:  # type: ignore[attr-defined]
            rows = self._flow_rows(s, owner, limit, names, lease, limit if start is None else start)
        return self._claimed_rows(rows)  # type: ignore[attr-defined, no-any-return]

    _resolved_at = 0.0

    def _resolve_some(self) -> None:
        """At most once a second, key the runs of this process's tasks that were made where
        their keys could not be computed (rota.limit_specs; a callable by=)."""
        resolve = getattr(self, "flow_resolve", None)
        if resolve is not None and (now := time.monotonic()) >= self._resolved_at + 1.0:
            self._resolved_at = now
            resolve()

    def _flow_rows(self, s: Any, owner: str, limit: int, names: Any, lease: float, start: int) -> list[Any]:
        """The flow claim's statements, in the caller's transaction: the claimed rows. When
        every key taken is a limit key, one statement after the locks counts their slots and
        claims their first waiting runs (flow_take_limits), the first `start` started, the
        rest held (a held run counts against its limit as a running one: it is `running`).
        With a rate key, step by step, and only into the `start` free slots (a rated run's
        start is logged when it is claimed)."""
        return self._flow_take_heads(s, self._flow_heads(s, limit, names), owner, limit, names, lease, start)

    def _flow_take_heads(
        self, s: Any, heads: list[Any], owner: str, limit: int, names: Any, lease: float, start: int
    ) -> list[Any]:
        """The second half of _flow_rows: claim runs of the keys `heads` locked."""
        keys = [[str(k), str(name), str(v)] for k, name, v, _ in heads]
        if not keys:
            return []
        if all(k[0] == "l" for k in keys):
            return self._flow_take_limits(s, keys, owner, limit, names, lease, start)  # type: ignore[attr-defined, no-any-return]
        limit = min(limit, start)
        if limit <= 0:
            return []
        room = {(str(k), str(n), str(v)): f for k, n, v, f in s.q("flow_room", keys=json.dumps(keys))}
        ids = list(_choose(s, room, limit, names))
        rows: list[Any] = self._flow_take(s, ids, owner, lease, len(ids)) if ids else []  # type: ignore[attr-defined]
        if rows:
            s.q("flow_started", ids=json.dumps([r[0] for r in rows]))
        for kind, name, key in room:
            if kind == "r":
                s.q("flow_bump", name=name, key=key)
                s.q("flow_prune", name=name, key=key)
        return rows

    def _flow_heads(self, s: Any, limit: int, names: Any) -> list[Any]:
        """The keys locked for a flow claim of up to `limit` runs: (kind, name, key, room seen)."""
        n = heads_wanted(limit)
        if self._flow_capped:  # many keys wait: look near the head first
            heads: list[Any] = self._walked_heads(s, names, n)
        else:
            heads = s.q("flow_heads", queues=names, n=n)
        return self._note_heads(heads, n)

    def _note_heads(self, heads: list[Any], n: int) -> list[Any]:
        """What the keys a flow claim locked (`heads`, at most `n`) say of the next claim."""
        self._flow_capped = len(heads) >= n  # more keys may have room: not blocked
        # (a run with a limit and a rate uses a unit of both keys: their sum says nothing)
        limits_only = all(h[0] == "l" for h in heads)
        self._flow_room = sum(max(int(h[3] or 0), 0) for h in heads) if limits_only else None
        return heads

    def _walked_heads(self, s: Any, names: Any, n: int) -> list[Any]:
        """flow_heads after a claim that took as many keys as it may: each backend's."""
        raise NotImplementedError  # pragma: no cover

    def _flow_finish_and_claim(
        self, outcomes: Sequence[Any], owner: str, limit: int, queues: Sequence[str] | None, lease: float, free: int
    ) -> tuple[set[int], int, list[Claimed], bool, bool]:
        """One transaction: write `outcomes` (freeing their slots), the flow claim into the
        free slots, the plain claim for the rest, the probes. (written, limited or rated runs
        taken, all claimed, whether any are still due, whether runs without a limit may be:
        the plain claim got all it asked for, or, asked for none, the plain_due probe)."""
        raise NotImplementedError  # pragma: no cover - each backend's

    def poll_after_claim(self, queues: Sequence[str] | None) -> PollState:
        """As poll_state, after a claim that got fewer runs than it asked for. While the
        last flow claim left due limited runs waiting for a slot, their due time (past)
        says nothing: the next run due is the first due later (a slot that frees wakes the
        workers: the trigger's NOTIFY, the data_version watch, this worker's own run
        ending), so a worker waiting on a full limit sleeps rather than claims in a loop."""
        if not (self.flow_blocked and self.flow_due):
            return self.poll_state(queues)  # type: ignore[attr-defined, no-any-return]
        names = None if queues is None else self._names(queues)  # type: ignore[attr-defined]
        with self._read() as s:  # type: ignore[attr-defined]
            row = s.q("flow_poll_later", queues=names)[0]
        now = self._dt(row[0])  # type: ignore[attr-defined]
        return PollState(now, self._due_time(row[1]), self._due_time(row[2]))  # type: ignore[attr-defined]

    def limits_due(self) -> bool:
        """Limited or rated runs were last seen due: outcomes written with the next claim
        free their slots for it (the worker takes its queued outcomes along)."""
        return self.flow_active and self.flow_due

    def limits_wait(self) -> bool:
        """Due limited runs wait for a slot (the last flow claim found their limits full):
        a run of this worker that ends may free one, so it claims again at once."""
        return self.flow_active and self.flow_due and self.flow_blocked

    def limits_full(self) -> bool:
        """A claim now would find nothing: the due limited runs wait for slots, and the last
        claim that asked for runs without a limit found fewer than it asked for."""
        return self.limits_wait() and not self.plain_due


def heads_wanted(limit: int) -> int:
    """How many keys a flow claim of up to `limit` runs locks at most."""
    return min(limit + _EXTRA_KEYS, _MAX_KEYS)


def _room(asked: int, free: int, claimed: int) -> int:
    """How many limited runs a claim may still take: free slots the plain claim did not start
    (it starts the first `free` of its runs), within what the caller asked for."""
    return max(0, min(asked, free - min(claimed, free)))


def _choose(s: Any, room: dict[tuple[str, str, str], Any], limit: int, queues: Any) -> Iterator[int]:
    """The runs to take: for each locked key with room, its first waiting runs while every
    key of the run is locked and has room (each taken run uses one unit of each)."""
    free = {k: int(v) for k, v in room.items() if v is not None}
    chosen: set[int] = set()
    for kind, name, key in room:
        left = free.get((kind, name, key), 0)
        if left <= 0:
            continue
        query = "flow_waiting_limit" if kind == "l" else "flow_waiting_rate"
        for run_id, lname, lkey, rname, rkey in s.q(query, name=name, key=key, n=left, queues=queues):
            if len(chosen) >= limit or run_id in chosen:
                continue
            need = [k for k in (("l", lname, lkey), ("r", rname, rkey)) if k[1] is not None]
            if all(free.get((k[0], str(k[1]), str(k[2])), 0) > 0 for k in need):
                for k in need:
                    free[(k[0], str(k[1]), str(k[2]))] -= 1
                chosen.add(int(run_id))
                yield int(run_id)
        if len(chosen) >= limit:
            return
