"""Store operations written once as (query, params) steps, so that the same logic runs on
a sync session (the store's own, or a caller's connection) and on an async one (a caller's
psycopg AsyncConnection): the generator yields each query and receives its rows."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Protocol, cast

Row = tuple[Any, ...]
InsertSteps = Generator[tuple[str, dict[str, Any]], list[Row], list[tuple[int, bool]]]


class SyncSession(Protocol):
    def q(self, name: str, /, **params: Any) -> list[Row]: ...


class AsyncSession(Protocol):
    """A Session over an async connection (psycopg.AsyncConnection)."""

    async def q(self, name: str, /, **params: Any) -> list[Row]: ...


def drive(s: SyncSession, steps: InsertSteps) -> list[tuple[int, bool]]:
    """Execute (query, params) steps on a session, sending each result back."""
    try:
        query, params = next(steps)
        while True:
            query, params = steps.send(s.q(query, **params))
    except StopIteration as done:
        return cast(list[tuple[int, bool]], done.value)


async def drive_async(s: AsyncSession, steps: InsertSteps) -> list[tuple[int, bool]]:
    try:
        query, params = next(steps)
        while True:
            query, params = steps.send(await s.q(query, **params))
    except StopIteration as done:
        return cast(list[tuple[int, bool]], done.value)
