"""The MySQL store's hot path: claims, starts, heartbeats, finishes and hand-backs, each one
short transaction run again at once after a deadlock (a mixin of MySQLStore)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..base import Claimed, Outcome
from ..sqlstore.outcomes import by_statement, held_outcomes
from ..sqlstore.token_counter import next_token
from .session import Session

if TYPE_CHECKING:
    from collections.abc import Callable


class MySQLHotPath:
    """What a worker calls every poll (`_tx`, `_again`, `_claimed_rows` are the store's)."""

    if TYPE_CHECKING:

        def _tx(self) -> Any: ...

        def _read(self) -> Any: ...

        def _again(self, op: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any: ...

        def _claimed_rows(self, rows: list[Any]) -> list[Claimed]: ...

        def _names(self, values: Sequence[str] | None) -> Any: ...

        def _notify(self, s: Any, payload: str) -> None: ...

        def _refuse(self, s: Any, refused: Sequence[Outcome]) -> None: ...

        def _finish_durable(self, s: Any, outcomes: Sequence[Outcome]) -> None: ...

        def _take_tokens(self, n: int) -> int | None: ...

    def _plain_claim(
        self, owner: str, limit: int, queues: Sequence[str] | None, lease: float, start: int | None = None
    ) -> list[Claimed]:
        return self._claimed_rows(self._again(self._claim_tx, owner, limit, queues, lease, start))

    def _claim_tx(
        self,
        owner: str,
        limit: int,
        queues: Sequence[str] | None,
        lease: float,
        start: int | None,
        ahead: float | None = None,
    ) -> list[Any]:
        with self._tx() as s:
            return self._claim(s, owner, limit, queues, lease, start, ahead)

    def claim_ahead(
        self, owner: str, limit: int, queues: Sequence[str] | None, lease: float, ahead: float
    ) -> list[Claimed]:
        return self._claimed_rows(self._again(self._claim_tx, owner, limit, queues, lease, 0, ahead))

    def _claim(
        self,
        s: Session,
        owner: str,
        limit: int,
        queues: Sequence[str] | None,
        lease: float,
        start: int | None,
        ahead: float | None = None,
    ) -> list[Any]:
        """claim (the first `start` started), or with `ahead` claim_ahead (all held). The due
        runs first (FOR UPDATE SKIP LOCKED, with the columns the claim hands back and the
        database's clock, read once: the start and the lease are from it), then their tokens
        (taken and committed on the store's token connection: the counter's row is locked for
        that one statement, not to this claim's commit), then the UPDATE of those ids, not read
        back: a claim that finds nothing locks nothing. Tokens are taken after the runs are
        locked: a run's previous claim committed before, with a smaller token. A transaction
        that locked the counter already (a flow claim's, a rebase) takes them in itself."""
        params: dict[str, Any] = {"owner": owner, "lease": lease, "limit": limit}
        if ahead is None:
            params["start"], name = limit if start is None else start, "claim"
        else:
            params["ahead"], name = ahead, "claim_ahead"
        if queues is not None:
            name, params["queues"] = name + "_in_queues", self._names(queues)
        locked = s.q(name + "_ids", **params)
        if not locked:
            return []
        ids = [int(r[0]) for r in locked]
        # one token per claimed run; in this transaction when it holds the counter's row
        # already (a flow claim's) or the token connection waited 1 s for it (_take_tokens)
        last = None if s.counter else self._take_tokens(len(ids))
        if last is None:
            s.q("take_tokens", n=len(ids))
            last = int(s.cur.lastrowid or 0)
        if last < len(ids):  # the counter is damaged: it starts again past the runs' tokens
            last = next_token(s) + len(ids) - 1
            s.q("take_token", token=last)
        token, at = last - len(ids) + 1, locked[0][-1]
        lease_until = at + timedelta(seconds=lease)
        start = 0 if ahead is not None else params["start"]
        s.q(name, **params, token=token, at=at, _ids=ids, _idlist=",".join(map(str, ids)))
        return [claimed_row(row, k, token, start, at, lease_until) for k, row in enumerate(locked)]

    def _plain_finish_and_claim(
        self,
        outcomes: Sequence[Outcome],
        owner: str,
        limit: int,
        queues: Sequence[str] | None,
        lease: float,
        start: int | None = None,
    ) -> tuple[set[int], list[Claimed]]:
        written, rows = self._again(self._finish_and_claim_tx, outcomes, owner, limit, queues, lease, start)
        return written, self._claimed_rows(rows)

    def _finish_and_claim_tx(
        self,
        outcomes: Sequence[Outcome],
        owner: str,
        limit: int,
        queues: Sequence[str] | None,
        lease: float,
        start: int | None,
    ) -> tuple[set[int], list[Any]]:
        with self._tx() as s:
            written = self._finish(s, outcomes)
            rows = self._claim(s, owner, limit, queues, lease, start)
        return written, rows

    def start(self, held: Sequence[tuple[int, int, float]]) -> set[int]:
        if not held:
            return set()
        return self._again(self._start, held)  # type: ignore[no-any-return]

    def _start(self, held: Sequence[tuple[int, int, float]]) -> set[int]:
        started: set[int] = set()
        with self._tx() as s:
            for run_id, token, ago in sorted(held):
                if s.q("start", id=run_id, token=token, ago=ago):
                    started.add(run_id)
        return started

    def heartbeat(self, held: Sequence[tuple[int, int]], lease: float) -> tuple[set[int], set[int]]:
        if not held:
            return set(), set()
        return self._again(self._heartbeat, held, lease)  # type: ignore[no-any-return]

    def _heartbeat(self, held: Sequence[tuple[int, int]], lease: float) -> tuple[set[int], set[int]]:
        alive: set[int] = set()
        cancel: set[int] = set()
        with self._tx() as s:
            for run_id, token in sorted(held):
                rows = s.q("heartbeat", id=run_id, token=token, lease=lease)
                if rows:
                    alive.add(run_id)
                    if rows[0][0]:
                        cancel.add(run_id)
        return alive, cancel

    def finish(self, outcomes: Sequence[Outcome]) -> set[int]:
        if not outcomes:
            return set()
        return self._again(self._finish_tx, outcomes)  # type: ignore[no-any-return]

    def _finish_tx(self, outcomes: Sequence[Outcome]) -> set[int]:
        with self._tx() as s:
            return self._finish(s, outcomes)

    def _finish(self, s: Session, outcomes: Sequence[Outcome]) -> set[int]:
        """The outcomes whose token still holds their run, read first with their rows locked
        (finish_holding, FOR UPDATE in id order: two finishers never lock in opposite
        orders), then written: plain successes in one statement, the others one by one.
        Then what PostgreSQL's triggers do on rota_runs itself (see `settle`)."""
        if not outcomes:
            return set()
        ids = sorted({o.id for o in outcomes})
        rows = s.q("finish_holding", ids=ids)
        holding = {(int(row[0]), int(row[1])) for row in rows}
        settles = {int(row[0]) for row in rows if row[2]}
        mine = held_outcomes(outcomes, holding)
        if mine:
            self._finish_batch(s, mine)
            settle(s, sorted(o.id for o in mine if o.id in settles))
        return {o.id for o in mine}

    def _finish_batch(self, s: Session, outcomes: Sequence[Outcome]) -> None:
        plain, refused, other = by_statement(outcomes)
        self._finish_durable(s, outcomes)  # (rota.durable: last checkpoints, parks; their own statements)
        if refused:
            self._refuse(s, refused)
        if plain:
            rows = json.dumps([[o.id, o.token, o.result, o.started] for o in plain])
            s.q("finish_succeeded", rows=rows)
        for o in other:
            s.q("finish", id=o.id, token=o.token, status=o.status, result=o.result, error=o.error,
                retry_in=o.retry_in, history=o.history, started=o.started)  # fmt: skip

    def hand_back(self, held: Sequence[tuple[int, int]], reason: str) -> set[int]:
        if not held:
            return set()
        return self._again(self._hand_back, held, reason)  # type: ignore[no-any-return]

    def _hand_back(self, held: Sequence[tuple[int, int]], reason: str) -> set[int]:
        back: set[int] = set()
        with self._tx() as s:
            for run_id, token in sorted(held):
                if s.q("hand_back", id=run_id, token=token, reason=reason):
                    back.add(run_id)
            settle(s, sorted(back))
            self._notify(s, "run")
        return back


def claimed_row(row: Sequence[Any], k: int, token: int, start: int, at: Any, lease_until: Any) -> tuple[Any, ...]:
    """The `k`-th run a claim locked (claim_columns, in claim order) as its update left it: the
    row the claim hands back, in claimed_columns' order, without reading it again."""
    started = k < start
    attempt = row[4] + 1 if started and row[4] < 2147483647 else row[4]
    return (*row[:4], attempt, row[5], token + k, *row[6:9], row[9], at if started else None, lease_until, *row[10:13])


def settle(s: Session, ids: Sequence[int]) -> None:
    """After runs `ids` may have ended, in the same transaction: hand each exclusive
    schedule's slot to its oldest held run, release the dependents of a succeeded run (the
    last parent to finish makes one due) and cancel those of a run that ended otherwise, and
    their dependents in turn (what SQLite's and PostgreSQL's triggers do)."""
    ended = [tuple(r) for r in s.q("ended_runs", ids=list(ids))] if ids else []
    while ended:
        for schedule in sorted({str(r[2]) for r in ended if r[2] is not None and r[3]}):
            s.q("promote_held", schedule=schedule)
            _wake_if_changed(s)
        parents = [r for r in ended if r[4]]
        ended = []
        for parent_id, status, *_ in parents:
            if status == "succeeded":
                s.q("release_dependents", parent=parent_id)
                _wake_if_changed(s)
            else:
                cancelled = s.q("cancel_dependents", parent=parent_id)
                if cancelled:
                    ended += [tuple(r) for r in s.q("ended_runs", ids=[int(r[0]) for r in cancelled])]


def _wake_if_changed(s: Session) -> None:
    """A run made due or handed its schedule's slot by the statement just run wakes this
    process's workers after COMMIT (PostgreSQL's triggers NOTIFY; MySQL has no NOTIFY, and the
    other processes see it through their change probe)."""
    if s.cur.rowcount > 0 and "run" not in s.wake:
        s.wake.append("run")
