"""Which of a finish's outcomes are written, and by which statement: what SQLite's and MySQL's
finish share (PostgreSQL sorts its batches in one pass: postgres/session.py finish_batches)."""

from __future__ import annotations

from collections.abc import Sequence

from ..base import Outcome
from ..records import OWN_STATEMENT, REFUSED


def held_outcomes(outcomes: Sequence[Outcome], holding: set[tuple[int, int]]) -> list[Outcome]:
    """The outcomes whose (id, token) is in `holding` (the runs their token still holds, read
    in the finish's transaction), the first one of an attempt only. A refused outcome left
    out is told it was not written (a try undone before may have set its status)."""
    left = set(holding)
    mine = []
    for o in outcomes:
        if (o.id, o.token) in left:
            left.discard((o.id, o.token))  # one outcome per attempt: the first
            mine.append(o)
        elif o.status == REFUSED:
            o.written_status = None
    return mine


def by_statement(outcomes: Sequence[Outcome]) -> tuple[list[Outcome], list[Outcome], list[Outcome]]:
    """(plain successes, for finish_succeeded in one statement; the refused, for refuse; the
    others, for finish), in one pass; parked outcomes in none (their own statements)."""
    plain: list[Outcome] = []
    refused: list[Outcome] = []
    other: list[Outcome] = []
    for o in outcomes:
        if o.status == REFUSED:
            refused.append(o)
        elif o.status == "succeeded" and o.history is None:
            plain.append(o)
        elif o.status not in OWN_STATEMENT:
            other.append(o)
    return plain, refused, other
