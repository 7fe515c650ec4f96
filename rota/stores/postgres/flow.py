"""PostgreSQL's half of the flow claim (the design: rota/stores/sqlstore/limits.py; what both halves share: sqlstore/limits_sql.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..base import Claimed
from ..sqlstore.checkpoints import finish_steps
from ..sqlstore.limits import _WALK, FlowMixin, heads_wanted
from ..sqlstore.limits_sql import _Synced, flow_due_call


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
        from ..postgres.session import (
            CLAIM_PLAN,
            claim_call,
            claimed,
            finish_batches,
            finished_schedules_lock,
            settle_refused,
        )

        batches = finish_batches(outcomes)
        lock = [*([finished_schedules_lock(outcomes)] if len(batches) > 1 else []), *finish_steps(outcomes)]
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
        from ..postgres.session import claim_call, claimed, finish_batches, finished_schedules_lock, settle_refused

        if limit > 0 and not self.plain_due and self._flow_room is not None and not self._flow_capped:
            return self._flow_one_trip(outcomes, owner, limit, queues, lease, free)
        batches = finish_batches(outcomes)
        lock = [*([finished_schedules_lock(outcomes)] if len(batches) > 1 else []), *finish_steps(outcomes)]
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
        from ..postgres.session import claimed, finish_batches, finished_schedules_lock, settle_refused

        batches = finish_batches(outcomes)
        lock = [*([finished_schedules_lock(outcomes)] if len(batches) > 1 else []), *finish_steps(outcomes)]
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
        from ..postgres.session import claimed

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
