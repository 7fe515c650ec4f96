"""Group commit of step checkpoints (issue 43): the checkpoints that the handlers of one
process make at the same time go to the store together, one fenced statement and one
commit for the batch (save_steps), instead of one transaction each.

No thread of its own, no timer: the first caller that finds no batch in flight writes the
batch (all that are waiting, itself included); the callers that arrive meanwhile wait, and
when the batch in flight commits, the first of them writes the next. So a lone checkpoint
waits for nobody, and under load the batches grow by themselves.

Riding (GroupCommit.board, Ride): in a busy worker, the checkpoints waiting go along in the
worker's next finish or finish-and-claim transaction instead (one more statement in it, no
commit of their own); a lone checkpoint waits a few ms (WINDOW) for such a transaction, and
only while one came recently; if none comes, it is written on its own as above.

What stays as it was: a step call returns only after its checkpoint committed, in its own
transaction or in the one it rode (a saved step is durable before the handler goes on; a
riding transaction that fails hands its checkpoints back, to be written on their own); each checkpoint is fenced by its own run's token in
the statement (a stale worker's checkpoint is refused, the others of its batch commit); a
batch that fails is written again one checkpoint at a time, so that one bad checkpoint
fails alone."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

Key = tuple[int, str]  # (run id, step name)
MAX_BATCH = 200  # checkpoints in one statement
WINDOW = 0.003  # seconds a lone checkpoint waits for a transaction of the worker's to ride
RECENT = 0.05  # ... if one asked for checkpoints this recently (otherwise: written at once)


class _Waiting:
    __slots__ = ("error", "key", "lead", "row", "saved", "settled")

    def __init__(self, row: dict[str, Any]) -> None:
        self.row = row
        self.key: Key = (int(row["id"]), str(row["name"]))
        self.lead = False  # this caller writes the next batch (the one after it, if taken)
        self.settled = False  # written (or refused, or failed): `result` is known
        self.saved = False
        self.error: BaseException | None = None

    def result(self) -> bool:
        if self.error is not None:
            raise self.error
        return self.saved


class GroupCommit:
    """`save(row)`: True once the checkpoint committed, False if refused (its token no
    longer holds the run, or the step had succeeded before). `write(rows)` writes a batch
    in one transaction and returns the keys written; `one(row)` writes one on its own.

    Riding: a transaction the worker commits anyway (a finish, a finish-and-claim) takes the
    waiting checkpoints along (`board`: one more statement in it), and settles them once it
    committed (`arrived`) or hands them back if it failed or did not run their statement
    (`left`: then they are written on their own, as if it had never taken them). A lone
    checkpoint waits up to `window` seconds for such a transaction, only while the process
    has had one in the last RECENT seconds (a busy worker); otherwise it writes at once."""

    def __init__(self, write: Callable[[Sequence[dict[str, Any]]], set[Key]],
                 one: Callable[[dict[str, Any]], bool], window: float = WINDOW) -> None:  # fmt: skip
        self._write = write
        self._one = one
        self.window = window
        self._cond = threading.Condition()
        self._queue: list[_Waiting] = []
        self._busy = False  # a caller leads: writes the batches until none is waiting
        self._offered = -RECENT  # monotonic time a riding transaction last asked for checkpoints
        self.batches = 0  # batches written, and the checkpoints in them (the bench's figures)
        self.written = 0
        self.rode = 0  # checkpoints written in another transaction (`board`)
        self._handed_back = 0  # rides that failed (`left`)

    def save(self, row: dict[str, Any]) -> bool:
        me = _Waiting(row)
        with self._cond:
            self._queue.append(me)
            fresh = not self._busy
            if fresh:
                me.lead = self._busy = True
            if fresh and self.window > 0 and time.monotonic() - self._offered < RECENT:
                back = self._handed_back  # a ride may take it meanwhile; one that fails: written now
                self._cond.wait_for(lambda: me.settled or self._handed_back != back, self.window)
        while True:
            with self._cond:
                self._cond.wait_for(lambda: me.settled or me.lead)
                if not me.lead:
                    return me.result()
                batch = self._take()
            try:
                self._flush(batch)
            finally:
                self._hand_over(batch, me)

    def _take(self, skip: frozenset[Key] = frozenset()) -> list[_Waiting]:
        """The waiting checkpoints, one per (run, step), at most MAX_BATCH (the rest wait);
        the lock held."""
        batch: list[_Waiting] = []
        rest: list[_Waiting] = []
        keys: set[Key] = set(skip)
        for w in self._queue:
            if w.key in keys or len(batch) >= MAX_BATCH:
                rest.append(w)
            else:
                keys.add(w.key)
                batch.append(w)
        self._queue = rest
        return batch

    def _flush(self, batch: list[_Waiting]) -> None:
        if not batch:
            return
        try:
            written = self._write([w.row for w in batch])
        except Exception as exc:
            if len(batch) == 1:
                batch[0].error = exc
                return
            for w in batch:  # one at a time: a bad checkpoint fails alone
                try:
                    w.saved = self._one(w.row)
                except Exception as one_exc:  # handed to that checkpoint's caller
                    w.error = one_exc
            return
        except BaseException as exc:  # (KeyboardInterrupt in the writing thread): every caller hears it
            for w in batch:
                w.error = exc
            raise
        self.batches += 1
        self.written += len(batch)
        for w in batch:
            w.saved = w.key in written

    def _hand_over(self, batch: list[_Waiting], me: _Waiting) -> None:
        """Settle the batch, and make the first waiting caller lead (write the next batch)."""
        with self._cond:
            for w in batch:
                w.settled = True
            me.lead = False
            self._next_lead()
            self._cond.notify_all()

    def _next_lead(self) -> None:
        if self._queue:
            self._queue[0].lead = True
        else:
            self._busy = False

    # -- riding another transaction ------------------------------------------------------
    def board(self, skip: frozenset[Key] = frozenset()) -> list[_Waiting]:
        """The waiting checkpoints (not `skip`'s keys), taken by a transaction about to commit."""
        with self._cond:
            self._offered = time.monotonic()
            return self._take(skip) if self._queue else []

    def arrived(self, riders: list[_Waiting], written: set[Key]) -> None:
        """The riding transaction committed: `written`, the keys its statement wrote."""
        if riders:
            with self._cond:
                for w in riders:
                    w.saved = w.key in written
                    w.settled = True
                self.rode += len(riders)
                self._cond.notify_all()

    def left(self, riders: list[_Waiting]) -> None:
        """The riding transaction failed (rolled back) or did not run their statement: the
        checkpoints wait again, first in line, to be written on their own."""
        if riders:
            with self._cond:
                self._queue[:0] = riders
                self._handed_back += 1
                if not self._busy:
                    self._busy = True
                    self._next_lead()
                self._cond.notify_all()


class Ride:
    """The checkpoints one transaction takes along: `calls` (one save_steps statement, or
    none), `got(rows)` with that statement's rows. Used as a context manager around the
    transaction (entered before it begins, left after it committed): settles the riders if
    it committed and ran their statement, hands them back otherwise."""

    def __init__(self, group: GroupCommit | None, skip: frozenset[Key] = frozenset()) -> None:
        self.group = group
        self.riders = group.board(skip) if group is not None else []
        rows = [w.row for w in self.riders]
        self.calls: list[tuple[str, dict[str, Any]]] = [("save_steps", {"rows": rows_json(rows)})] if rows else []
        self.written: set[Key] | None = None

    def got(self, rows: Sequence[Sequence[Any]]) -> None:
        self.written = {(int(r[0]), str(r[1])) for r in rows}

    def first(self, received: Sequence[Sequence[Sequence[Any]]]) -> None:
        """`got` with the rows of the first of a pipeline's statements (theirs, if any)."""
        if self.calls:
            self.got(received[0])

    def __enter__(self) -> Ride:
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        if self.group is None:
            return
        if kind is None and self.written is not None:
            self.group.arrived(self.riders, self.written)
        else:
            self.group.left(self.riders)


def rows_json(rows: Sequence[dict[str, Any]]) -> str:
    return json.dumps(list(rows), separators=(",", ":"))


def finish_steps(outcomes: Sequence[Any]) -> list[tuple[str, dict[str, Any]]]:
    """The statement that writes the outcomes' deferred checkpoints (Outcome.steps: a step
    its handler returned at once), sent in the finish's transaction before the outcomes."""
    rows = [row for o in outcomes if o.steps is not None for row in o.steps]
    return [("save_steps", {"rows": rows_json(rows)})] if rows else []
