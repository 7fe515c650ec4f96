"""The flow claim statement by statement in one transaction, its runs' tokens from the counter
row: SQLite's and MySQL's (the design: limits.py; PostgreSQL pipelines it instead:
rota/stores/postgres/flow.py; what both ways share: limits_sql.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..base import Claimed, Outcome
from ..records import REFUSE_DELAY, UNKNOWN_TASK_GRACE
from .limits import _WALK, FlowMixin, _choose
from .limits_sql import flow_due_call
from .token_counter import next_token


class StepwiseFlow(FlowMixin):
    """SQLite and MySQL: tokens from the counter row, as in `claim` (the store turns rows into
    Claimed; MySQL locks the counter's row first, in its `_flow_rows`)."""

    def _walked_heads(self, s: Any, names: Any, n: int) -> list[Any]:
        """The keys near the head first; the others (loose scan) only if too few (one writer:
        no lock to take, the room seen is the room; MySQL's flow claim holds the counter's row)."""
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
        token = next_token(s)
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
        no room of its rate; PostgreSQL's refuse does it in its own statement). SQLite's and
        MySQL's finish call it."""
        grace, (low, high) = UNKNOWN_TASK_GRACE, REFUSE_DELAY
        for o in refused:
            s.q("refuse_unlog", id=o.id, token=o.token)
            got = s.q("refuse", id=o.id, token=o.token, error=o.error, grace=grace, delay_min=low, delay_max=high)
            o.written_status = got[0][1] if got else None
