"""The fencing tokens' counter row, as SQLite and MySQL keep it (PostgreSQL: a sequence)."""

from __future__ import annotations

from typing import Any

from ... import quarantine


def next_token(s: Any) -> int:
    """The next fencing token of a claim. A damaged counter (edited by hand: at its column's
    maximum, or below 0) would fail every claim of every worker: it is named once and starts
    again past the tokens the runs hold, written at once (one write, not a scan per poll)."""
    token, stored = s.q("next_token")[0]
    if token is not None:
        return int(token)
    rebased = int(s.q("token_rebase")[0][0])
    s.q("take_token", token=rebased - 1)
    reason = f"the token counter {stored!r} leaves no room for fencing tokens; it starts again at {rebased}"
    quarantine.report(quarantine.COUNTER, "token", reason)
    return rebased
