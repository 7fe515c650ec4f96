"""Where a PostgreSQL claim starts in the claim index (issue 45, item 3).

A claim updates each run it takes, so the run's pending row version stays behind in the
claim index (rota_runs_claim_from, keyed (-priority, due_at, id) ascending), at the front:
the runs claimed first are the earliest due. Vacuum removes those entries, and a scan marks
them dead for the scans after it, only once no transaction could still see them. While a
session sits idle in a transaction (or a long report runs, or a replication slot or a
standby holds the xmin horizon back) nothing can do either, and a claim that walks the index
from its front visits every run claimed since: measured 7x slower after 10 minutes at 300
runs a second (bench/xmin_hold.py).

So a store remembers, per set of queues, where its claims ended, and a claim starts where
they stood FROM_LAG seconds ago: it walks only what was claimed since (some hundred entries
at a few hundred runs a second), however many dead entries lie before. A run enqueued in a
transaction that began before the last claimed one's but committed after it lands after
that point, and is found. A run can still land further back: a higher priority, an explicit
time in the past, a run handed back or rescued by another process, a transaction that took
longer than FROM_LAG to commit. So a claim starts from the front of the index at least every
FRONT_EVERY seconds, and at once after this store itself enqueued such a run, handed one
back or rescued one: such a run waits a second at most for a busy worker's claim. Never a
run skipped for good, never one claimed twice: `from` only narrows which pending runs one
claim looks at; the locks and the statement are those of every claim.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from ..records import NewRun

FROM_LAG = 0.5  # a claim starts where the claims stood this many seconds ago
FRONT_EVERY = 1.0  # a claim from the front of the index at least this often (seconds)
# the front: before every key ((-priority, ...) is at least -2**31 + 1, bigint)
FRONT: dict[str, Any] = {"from_p": -(2**62), "from_due": 0.0, "from_id": 0}
Position = tuple[int, float, int]  # (-priority, due_at in Unix seconds, id): the index's key
Key = tuple[str, ...] | None  # the queues a claim asks for (None: all)


class ClaimFrom:
    """Per set of queues, where the claims ended lately (see the module)."""

    def __init__(self) -> None:
        self._ended: dict[Key, deque[tuple[float, Position]]] = {}
        self._front_at: dict[Key, float] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(queues: Sequence[str] | None) -> Key:
        return None if queues is None else tuple(sorted(queues))

    def params(self, queues: Sequence[str] | None) -> dict[str, Any]:
        """The `from_*` parameters of the next claim: where the claims stood FROM_LAG
        seconds ago, or the front."""
        key, now = self._key(queues), time.monotonic()
        with self._lock:
            ended = self._ended.get(key)
            while ended and len(ended) > 1 and ended[1][0] <= now - FROM_LAG:
                ended.popleft()  # the newest one at least FROM_LAG old is kept, first
            if not ended or ended[0][0] > now - FROM_LAG or now >= self._front_at.get(key, 0.0) + FRONT_EVERY:
                self._front_at[key] = now
                return dict(FRONT)
            neg_priority, due, run_id = ended[0][1]
        return {"from_p": neg_priority, "from_due": due, "from_id": run_id}

    def claimed(self, queues: Sequence[str] | None, rows: Sequence[Any]) -> None:
        """After a claim: its rows (id first; priority and due time, Unix seconds, at 13 and 14:
        fragments.sql's claimed_columns)."""
        try:
            last = max((-int(r[13]), float(r[14]), int(r[0])) for r in rows)
        except (TypeError, ValueError):  # none, or a damaged row: nothing learnt
            return
        with self._lock:
            self._ended.setdefault(self._key(queues), deque()).append((time.monotonic(), last))

    def front(self) -> None:
        """The next claims from the front (this store put a run back, or enqueued one that
        may sort before where a claim ended)."""
        with self._lock:
            self._ended.clear()

    def enqueued(self, runs: Sequence[NewRun]) -> None:
        """Before this store enqueues runs: from the front if one may sort before where a
        claim ended (a higher priority, or a time given, perhaps past)."""
        with self._lock:
            latest = max((p for ended in self._ended.values() for _, (p, _, _) in ended), default=None)
        if latest is None:  # (-priority: the lowest priority claimed)
            return
        if any(-r.priority < latest or r.scheduled_for is not None or r.due_at is not None or r.delay < 0
               for r in runs):  # fmt: skip
            self.front()
