"""The PostgreSQL listener: LISTEN on the channel of the app's schema, reconnecting.

The channel is computed on the server (the `notify_channel` query) from current_schema(),
the schema the store's connections resolve rota's tables with, with the same expression as
the `notify` query: `rota` for public, `rota:<schema>` otherwise. Apps in other schemas of
the same database then neither wake nor cancel this app's runs.

The listening connection waits on its socket for as long as nothing comes: psycopg's own
waits wake every 0.1 s (so that a blocking caller sees Ctrl-C), which kept an idle worker's
event loop waking 10 times a second. Cancelling the listener's task ends the wait at once
either way (an asyncio future is cancelled, not polled)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported at run time in listen(): postgres.py reports a missing psycopg
    import psycopg

log = logging.getLogger("rota.store")


LISTEN_INTERVAL = 3600.0  # seconds between psycopg's looks while nothing arrives (see above)


def listener_class() -> type[psycopg.AsyncConnection[Any]]:
    """An AsyncConnection whose waits do not wake the loop every 0.1 s (see above)."""
    import psycopg

    class Listener(psycopg.AsyncConnection[Any]):
        # Other arguments pass through as given: psycopg before 3.3.5 has no `timeout` here,
        # and 3.2's `interval` may be None.
        async def wait(self, gen: Any, interval: float | None = LISTEN_INTERVAL, *args: Any, **kw: Any) -> Any:
            return await super().wait(gen, max(interval or 0.0, LISTEN_INTERVAL), *args, **kw)

    return Listener


async def channel_of(aconn: psycopg.AsyncConnection[Any], channel_sql: str) -> str:
    """The NOTIFY channel of the schema this connection resolves rota's tables in."""
    cur = await aconn.execute(channel_sql)
    row = await cur.fetchone()
    assert row is not None
    return str(row[0])


async def listen(connect: Callable[[], Any], channel_sql: str, on_payload: Callable[[str], None]) -> None:
    """LISTEN on the app's channel until cancelled, reconnecting with backoff."""
    import psycopg
    from psycopg import sql

    delay = 0.5
    while True:
        try:
            aconn = await connect()
        except psycopg.Error:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
            continue
        try:
            async with aconn:
                channel = await channel_of(aconn, channel_sql)
                await aconn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                delay = 0.5
                on_payload("listening")
                async for note in aconn.notifies():
                    on_payload(note.payload)
        except psycopg.Error as exc:
            log.debug("LISTEN connection lost: %s", exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
