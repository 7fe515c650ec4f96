"""Group commit of step checkpoints (issue 43): the checkpoints that the handlers of one
process make at the same time go to the store together, one fenced statement and one
commit for the batch (save_steps), instead of one transaction each.

No thread of its own, no timer: the first caller that finds no batch in flight writes the
batch (all that are waiting, itself included); the callers that arrive meanwhile wait, and
when the batch in flight commits, the first of them writes the next. So a lone checkpoint
waits for nobody, and under load the batches grow by themselves.

What stays as it was: a step call returns only after its checkpoint committed (a saved step
is durable before the handler goes on); each checkpoint is fenced by its own run's token in
the statement (a stale worker's checkpoint is refused, the others of its batch commit); a
batch that fails is written again one checkpoint at a time, so that one bad checkpoint
fails alone."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

Key = tuple[int, str]  # (run id, step name)
MAX_BATCH = 200  # checkpoints in one statement


class _Waiting:
    __slots__ = ("error", "key", "lead", "row", "saved", "wake")

    def __init__(self, row: dict[str, Any]) -> None:
        self.row = row
        self.key: Key = (int(row["id"]), str(row["name"]))
        # released once, by the writer of its batch (done) or of the batch before (lead): a
        # bare lock, not an Event (no Condition, no waiter list: a cheaper wait and wake-up)
        self.wake = threading.Lock()
        self.wake.acquire()
        self.lead = False  # woken to write the next batch (not done yet)
        self.saved = False
        self.error: BaseException | None = None

    def result(self) -> bool:
        if self.error is not None:
            raise self.error
        return self.saved


class GroupCommit:
    """`save(row)`: True once the checkpoint committed, False if refused (its token no
    longer holds the run, or the step had succeeded before). `write(rows)` writes a batch
    in one transaction and returns the keys written; `one(row)` writes one on its own."""

    def __init__(self, write: Callable[[Sequence[dict[str, Any]]], set[Key]],
                 one: Callable[[dict[str, Any]], bool]) -> None:  # fmt: skip
        self._write = write
        self._one = one
        self._lock = threading.Lock()
        self._queue: list[_Waiting] = []
        self._busy = False  # a batch is being written
        self.batches = 0  # batches written, and the checkpoints in them (the bench's figures)
        self.written = 0

    def save(self, row: dict[str, Any]) -> bool:
        me = _Waiting(row)
        with self._lock:
            self._queue.append(me)
            lead, self._busy = not self._busy, True
        if not lead:
            me.wake.acquire()
            if not me.lead:
                return me.result()
        batch = self._take()
        try:
            self._flush(batch)
        finally:
            self._hand_over(batch, me)
        return me.result()

    def _take(self) -> list[_Waiting]:
        """The waiting checkpoints, one per (run, step), at most MAX_BATCH (the rest wait)."""
        with self._lock:
            batch: list[_Waiting] = []
            rest: list[_Waiting] = []
            keys: set[Key] = set()
            for w in self._queue:
                if w.key in keys or len(batch) >= MAX_BATCH:
                    rest.append(w)
                else:
                    keys.add(w.key)
                    batch.append(w)
            self._queue = rest
        return batch

    def _flush(self, batch: list[_Waiting]) -> None:
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
        """Wake the batch's callers, and the first waiting one to write the next batch."""
        with self._lock:
            if self._queue:
                nxt = self._queue[0]
                nxt.lead = True
                nxt.wake.release()
            else:
                self._busy = False
        for w in batch:
            if w is not me:
                w.lead = False
                w.wake.release()


def rows_json(rows: Sequence[dict[str, Any]]) -> str:
    return json.dumps(list(rows), separators=(",", ":"))


def finish_steps(outcomes: Sequence[Any]) -> list[tuple[str, dict[str, Any]]]:
    """The statement that writes the outcomes' deferred checkpoints (Outcome.steps: a step
    its handler returned at once), sent in the finish's transaction before the outcomes."""
    rows = [row for o in outcomes if o.steps is not None for row in o.steps]
    return [("save_steps", {"rows": rows_json(rows)})] if rows else []
