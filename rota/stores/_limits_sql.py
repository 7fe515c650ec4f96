"""The flow claim's backend halves (see rota/stores/_limits.py for the design): how each SQL
store pipelines the flow claim with the plain one, walks the keys near the head, and gives
taken runs their tokens."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ._limits import _WALK, FlowMixin, _choose, heads_wanted
from .base import Claimed, Outcome
from .records import REFUSE_DELAY, UNKNOWN_TASK_GRACE


def flow_due_call(names: Any) -> tuple[str, dict[str, Any]]:
    """The flow_due probe for a worker of every queue (`names` None) or of some."""
    return ("flow_due", {}) if names is None else ("flow_due_in_queues", {"queues": names})


class _Synced:
    """A pipelined session whose `q` runs at once (the flow claim needs each answer)."""

    __slots__ = ("s",)

    def __init__(self, s: Any) -> None:
        self.s = s

    def q(self, name: str, /, **params: Any) -> list[Any]:
        if name == "flow_walk_plan":  # no rows to wait for: travels with the next statement
            self.s.cur.execute(self.s.queries[name], {"now": None})
            return []
        return self.s.q_synced(name, **params)  # type: ignore[no-any-return]


class PostgresFlow(FlowMixin):
    """PostgreSQL: each taken run gets its token from the sequence, as in `claim`."""

    def _walked_heads(self, s: Any, names: Any, n: int) -> list[Any]:
        s.q("flow_walk_plan")
        return s.q("flow_heads_walk", queues=names, n=n, m=_WALK * n)  # type: ignore[no-any-return]

    def _probed_finish_and_claim(
        self, outcomes: Sequence[Any], owner: str, limit: int, queues: Sequence[str] | None, lease: float, start: int
    ) -> tuple[set[int], list[Claimed], bool]:
        return self._again(self._probed_pipeline, outcomes, owner, limit, queues, lease, start)  # type: ignore[attr-defined, no-any-return]

    def _probed_pipeline(
        self, outcomes: Sequence[Any], owner: str, limit: int, queues: Sequence[str] | None, lease: float, start: int
    ) -> tuple[set[int], list[Claimed], bool]:
        """As the store's finish_and_claim (one pipelined transaction), with the probe last."""
        from ._pg_session import (
            CLAIM_PLAN,
            claim_call,
            claimed,
            finish_batches,
            finished_schedules_lock,
            settle_refused,
        )

        batches = finish_batches(outcomes)
        lock = [finished_schedules_lock(outcomes)] if len(batches) > 1 else []
        probe = flow_due_call(None if queues is None else list(queues))
        since = self.claim_from.params(queues)  # type: ignore[attr-defined]
        calls = [*lock, *batches, CLAIM_PLAN, claim_call(owner, limit, queues, lease, start, since), probe]
        with self._session(False, pipeline=True) as s:  # type: ignore[attr-defined]
            for query, params in calls:
                s.send(query, **params)
        *written, _, claims, due = s.received[len(lock) :]
        self.claim_from.claimed(queues, claims)  # type: ignore[attr-defined]
        settle_refused(outcomes, batches, written)
        return {r[0] for rows in written for r in rows}, claimed(claims), bool(due and due[0][0])

    def _flow_finish_and_claim(
        self, outcomes: Sequence[Any], owner: str, limit: int, queues: Sequence[str] | None, lease: float, free: int
    ) -> tuple[set[int], int, list[Claimed], bool, bool]:
        return self._again(self._flow_pipeline, outcomes, owner, limit, queues, lease, free)  # type: ignore[attr-defined, no-any-return]

    def _flow_pipeline(
        self, outcomes: Sequence[Any], owner: str, limit: int, queues: Sequence[str] | None, lease: float, free: int
    ) -> tuple[set[int], int, list[Claimed], bool, bool]:
        """In pipeline mode: BEGIN, the outcomes and flow_heads in one round trip; the flow
        claim's take in the next; the plain claim, the probe and COMMIT in the last. While a
        backlog of limited runs alone is due, all of it in one round trip (_flow_one_trip)."""
        from ._pg_session import claim_call, claimed, finish_batches, finished_schedules_lock, settle_refused

        if limit > 0 and not self.plain_due and self._flow_room is not None and not self._flow_capped:
            return self._flow_one_trip(outcomes, owner, limit, queues, lease, free)
        batches = finish_batches(outcomes)
        lock = [finished_schedules_lock(outcomes)] if len(batches) > 1 else []
        names = None if queues is None else list(queues)
        with self._session(False, pipeline=True) as s:  # type: ignore[attr-defined]
            for query, params in [*lock, *batches]:
                s.send(query, **params)
            heads = self._flow_heads(_Synced(s), limit, names) if limit > 0 else []
            take = bool(heads) and all(h[0] == "l" for h in heads)
            if take:  # sent with the plain claim, for the slots flow_heads saw (at most)
                expect = min(limit, sum(max(int(h[3] or 0), 0) for h in heads))
                keys = json.dumps([[str(k), str(name), str(v)] for k, name, v, _ in heads])
                start = min(expect, free)
                s.send("flow_take_limits", keys=keys, owner=owner, limit=expect, start=start, queues=names, lease=lease)
                rows: list[Any] = []
            else:
                rows = self._flow_take_heads(_Synced(s), heads, owner, limit, names, lease, min(limit, free))
                expect = start = len(rows)  # (a rated run is never held)
            probe = limit - expect <= 0  # the plain claim would ask for nothing: is any of its runs due?
            if not probe:
                query, params = claim_call(owner, limit - expect, queues, lease, free - start)
                s.send(query, **params)
            due_query, due_params = flow_due_call(names)
            s.send(due_query, **due_params)
            if probe:
                s.send("plain_due", queues=names)
        received = s.received[len(lock) :]
        more: list[Any] = []
        if probe:
            *written, due, probed = received
            plain = bool(probed and probed[0][0])
        else:
            *written, more, due = received
            plain = len(more) >= limit - expect
        if take:
            *written, rows = written
        settle_refused(outcomes, batches, written)
        got = claimed(rows)
        written_ids = {r[0] for rows_ in written for r in rows_}
        return written_ids, len(rows), got + claimed(more), bool(due and due[0][0]), plain

    def _flow_one_trip(
        self, outcomes: Sequence[Any], owner: str, limit: int, queues: Sequence[str] | None, lease: float, free: int
    ) -> tuple[set[int], int, list[Claimed], bool, bool]:
        """The flow claim in one round trip, for when the last one locked limit keys only (not
        as many as a claim may) and no run without a limit was due: BEGIN, the outcomes,
        flow_heads (which notes the keys it locks in the transaction), flow_take_limits of
        those keys (sent without keys: it reads the note, in a statement of its own, so it
        sees every claim committed before the locks), the probes and COMMIT. The plain claim
        is not sent: if the plain_due probe finds a run due, or flow_heads locked a rate key
        (left to the general path), the worker claims again at once (`_again_now`), and the
        next claim takes the two round trips of _flow_pipeline."""
        from ._pg_session import claimed, finish_batches, finished_schedules_lock, settle_refused

        batches = finish_batches(outcomes)
        lock = [finished_schedules_lock(outcomes)] if len(batches) > 1 else []
        names = None if queues is None else list(queues)
        n = heads_wanted(limit)
        due_query, due_params = flow_due_call(names)
        with self._session(False, pipeline=True) as s:  # type: ignore[attr-defined]
            for query, params in [*lock, *batches]:
                s.send(query, **params)
            s.send("flow_heads", queues=names, n=n)
            s.send("flow_take_limits", keys=None, owner=owner, limit=limit, start=free, queues=names, lease=lease)
            s.send(due_query, **due_params)
            s.send("plain_due", queues=names)
        *written, heads, rows, due, probed = s.received[len(lock) :]
        settle_refused(outcomes, batches, written)
        self._note_heads(heads, n)
        plain = bool(probed and probed[0][0])
        self._again_now = (plain and len(rows) < limit) or self._flow_room is None
        self.one_trips += 1
        return {r[0] for rows_ in written for r in rows_}, len(rows), claimed(rows), bool(due and due[0][0]), plain

    def _flow_take(self, s: Any, ids: list[int], owner: str, lease: float, start: int) -> list[Any]:
        return s.q("flow_take", ids=json.dumps(ids), owner=owner, lease=lease)  # type: ignore[no-any-return]  # all start

    def _flow_take_limits(
        self, s: Any, keys: list[list[str]], owner: str, limit: int, names: Any, lease: float, start: int
    ) -> list[Any]:
        return s.q(  # type: ignore[no-any-return]
            "flow_take_limits", keys=json.dumps(keys), owner=owner, limit=limit, start=start, queues=names, lease=lease
        )

    def _claimed_rows(self, rows: list[Any]) -> list[Claimed]:
        from ._pg_session import claimed

        return claimed(rows)

    def disown(self, owner: str, tokens: Sequence[int]) -> list[tuple[int, str]]:
        """One statement (its rated runs' starts leave their logs in a CTE): see Store.disown."""
        return self._again(self._disown, owner, json.dumps(sorted(tokens)))  # type: ignore[attr-defined, no-any-return]

    def _disown(self, owner: str, tokens: str) -> list[tuple[int, str]]:
        with self._tx() as s:  # type: ignore[attr-defined]
            rows = s.q("disown", owner=owner, tokens=tokens)
            if rows:
                self._notify(s, "run")  # type: ignore[attr-defined]
        return [(int(r[0]), str(r[1])) for r in rows]


class SQLiteFlow(FlowMixin):
    """SQLite: tokens from the counter row, as in `claim` (the store turns rows into Claimed)."""

    def _walked_heads(self, s: Any, names: Any, n: int) -> list[Any]:
        """The keys near the head first; the others (loose scan) only if too few (one writer:
        no lock to take, the room seen is the room)."""
        heads: list[Any] = s.q("flow_heads_walk", queues=names, n=n, m=_WALK * n)
        if len(heads) < n:
            seen = {tuple(h[:3]) for h in heads}
            heads += [h for h in s.q("flow_heads", queues=names, n=n) if tuple(h[:3]) not in seen][: n - len(heads)]
        return heads

    def _probed_finish_and_claim(
        self, outcomes: Sequence[Any], owner: str, limit: int, queues: Sequence[str] | None, lease: float, start: int
    ) -> tuple[set[int], list[Claimed], bool]:
        names = None if queues is None else self._names(queues)  # type: ignore[attr-defined]
        with self._tx() as s:  # type: ignore[attr-defined]
            written: set[int] = self._finish(s, outcomes) if outcomes else set()  # type: ignore[attr-defined]
            rows = self._claim(s, owner, limit, queues, lease, start) if limit > 0 else []  # type: ignore[attr-defined]
            due_query, due_params = flow_due_call(names)
            due = bool(s.q(due_query, **due_params)[0][0])
        return written, self._claimed_rows(rows), due  # type: ignore[attr-defined]

    def _flow_finish_and_claim(
        self, outcomes: Sequence[Any], owner: str, limit: int, queues: Sequence[str] | None, lease: float, free: int
    ) -> tuple[set[int], int, list[Claimed], bool, bool]:
        names = None if queues is None else self._names(queues)  # type: ignore[attr-defined]
        with self._tx() as s:  # type: ignore[attr-defined]
            written: set[int] = self._finish(s, outcomes) if outcomes else set()  # type: ignore[attr-defined]
            rows = self._flow_rows(s, owner, limit, names, lease, min(limit, free)) if limit > 0 else []
            got: list[Claimed] = self._claimed_rows(rows)  # type: ignore[attr-defined]
            left, started = limit - len(rows), sum(not c.held for c in got)
            more = self._claim(s, owner, left, queues, lease, free - started) if left > 0 else []  # type: ignore[attr-defined]
            due_query, due_params = flow_due_call(names)
            due = bool(s.q(due_query, **due_params)[0][0])
            plain = len(more) >= left if left > 0 else bool(s.q("plain_due", queues=names)[0][0])
        return written, len(rows), got + self._claimed_rows(more), due, plain  # type: ignore[attr-defined]

    def _flow_take_limits(
        self, s: Any, keys: list[list[str]], owner: str, limit: int, names: Any, lease: float, start: int
    ) -> list[Any]:
        """In process, a statement costs no round trip: the room, each key's first waiting
        runs (flow_waiting_limit, by index) and one flow_take."""
        room = {(str(k), str(n), str(v)): f for k, n, v, f in s.q("flow_room", keys=json.dumps(keys))}
        ids = list(_choose(s, room, limit, names))
        return self._flow_take(s, ids, owner, lease, start) if ids else []

    def _flow_take(self, s: Any, ids: list[int], owner: str, lease: float, start: int) -> list[Any]:
        """`ids` in the claim's order: the first `start` start, the rest are held."""
        token = int(s.q("next_token")[0][0])
        rows: list[Any] = s.q("flow_take", ids=json.dumps(ids), owner=owner, lease=lease, token=token, start=start)
        if rows:
            s.q("take_token", token=token + len(rows) - 1)
        return rows

    def disown(self, owner: str, tokens: Sequence[int]) -> list[tuple[int, str]]:
        """See Store.disown: the rated runs' logged starts go first (disown_unlog)."""
        known = json.dumps(sorted(tokens))
        with self._tx() as s:  # type: ignore[attr-defined]
            s.q("disown_unlog", owner=owner, tokens=known)
            rows = s.q("disown", owner=owner, tokens=known)
            if rows:
                self._notify(s, "run")  # type: ignore[attr-defined]
        return [(int(r[0]), str(r[1])) for r in rows]

    def _refuse(self, s: Any, refused: Sequence[Outcome]) -> None:
        """In the finish's transaction, the runs refused by a worker that does not register
        their task, one by one (rare): each learns the status it was given. A rated one's
        logged start goes first (refuse_unlog: its handler never started, so its refusal uses
        no room of its rate; PostgreSQL's refuse does it in its own statement)."""
        grace, (low, high) = UNKNOWN_TASK_GRACE, REFUSE_DELAY
        for o in refused:
            s.q("refuse_unlog", id=o.id, token=o.token)
            got = s.q("refuse", id=o.id, token=o.token, error=o.error, grace=grace, delay_min=low, delay_max=high)
            o.written_status = got[0][1] if got else None
