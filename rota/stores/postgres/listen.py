"""The PostgreSQL listener: LISTEN on the channel of the app's schema, reconnecting.

The channel is computed on the server (the `notify_channel` query) from current_schema(),
the schema the store's connections resolve rota's tables with, with the same expression as
the `notify` query: `rota` for public, `rota:<schema>` otherwise. Apps in other schemas of
the same database then neither wake nor cancel this app's runs.

The listening connection waits on its socket for as long as nothing comes: psycopg's own
waits wake every 0.1 s (so that a blocking caller sees Ctrl-C), which kept an idle worker's
event loop waking 10 times a second. Cancelling the listener's task ends the wait at once
either way (an asyncio future is cancelled, not polled).

A LISTEN connection is only ever read from, so a server that vanished without closing it
(a failover behind a load balancer or a proxy, a silent network drop) shows no error: it
just never delivers again, and the worker falls back to polling until the kernel gives up
on the socket many minutes later. So while nothing arrives the listener looks every
`check_every` seconds (`listen_check_interval`, 10 s): one query on the listening session
asks whether it still listens on the channel and is on a server that accepts writes (a
demoted primary left read-only never sees the new primary's NOTIFYs). No answer within the
same interval, or a wrong one: the connection is dropped, a new one listens, and the worker
looks for runs at once ("listening")."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported at run time in listen(): postgres.py reports a missing psycopg
    import psycopg

log = logging.getLogger("rota.store")


LISTEN_INTERVAL = 3600.0  # seconds between psycopg's looks while nothing arrives (see above)
CHECK_EVERY = 10.0  # seconds between liveness checks of the listening session (see above)
_LISTENING = "SELECT %s = ANY(ARRAY(SELECT pg_listening_channels())), current_setting('transaction_read_only') = 'off'"


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


async def listen(
    connect: Callable[[], Any],
    channel_sql: str,
    on_payload: Callable[[str], None],
    check_every: float = CHECK_EVERY,
) -> None:
    """LISTEN on the app's channel until cancelled, reconnecting with backoff, checking the
    session's liveness every `check_every` seconds (see above)."""
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
            channel = await channel_of(aconn, channel_sql)
            await aconn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            delay = 0.5
            on_payload("listening")
            while True:
                async for note in aconn.notifies(timeout=check_every):
                    on_payload(note.payload)
                problem = await _check(aconn, channel, check_every)
                if problem:
                    log.warning("LISTEN connection %s; replacing it (wake-ups resume on a new one)", problem)
                    break
        except psycopg.Error as exc:
            log.debug("LISTEN connection lost: %s", exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
        finally:
            with contextlib.suppress(psycopg.Error):
                await aconn.close()


async def _check(aconn: psycopg.AsyncConnection[Any], channel: str, within: float) -> str | None:
    """What is wrong with the listening session, or None: it must answer within `within`
    seconds that it listens on `channel` on a server that accepts writes. Raises
    psycopg.Error if the connection failed (the caller reconnects)."""
    look = asyncio.ensure_future(_listening(aconn, channel))
    done, _ = await asyncio.wait({look}, timeout=within)
    if not done:
        # A silent server: drop the socket first (a cancelled query would wait for the
        # server to acknowledge its cancellation, through the same silence).
        aconn.pgconn.finish()
        look.cancel()
        await asyncio.wait({look})
        return f"did not answer its liveness check within {within:g} s"
    listening, writable = look.result()
    if not writable:
        return "is on a read-only server (a standby, or a demoted primary)"
    return None if listening else "no longer listens on its channel"


async def _listening(aconn: psycopg.AsyncConnection[Any], channel: str) -> tuple[bool, bool]:
    cur = await aconn.execute(_LISTENING, (channel,))
    row = await cur.fetchone()
    assert row is not None
    return bool(row[0]), bool(row[1])
