"""The flow claim's backend halves (see rota/stores/sqlstore/limits.py for the design): how each SQL
store pipelines the flow claim with the plain one, walks the keys near the head, and gives
taken runs their tokens."""

from __future__ import annotations

from typing import Any


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
