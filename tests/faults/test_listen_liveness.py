"""The LISTEN connection's liveness is checked on a timer, not only through its errors: a
listening session whose server went silent (a failover behind a proxy or load balancer, a
dropped network path: no FIN, no RST) is replaced within the check interval."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import psycopg
import pytest

from rota.stores.postgres import PostgresStore

from .proxy import FaultProxy

pytestmark = pytest.mark.postgres
CHECK = 0.5


def notify(url: str, store: PostgresStore, payload: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        channel = conn.execute(store.queries["notify_channel"]).fetchone()
        assert channel is not None
        conn.execute("SELECT pg_notify(%s, %s)", (channel[0], payload))


async def until(condition: Callable[[], bool], timeout: float, what: str) -> float:
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.02)
    return time.monotonic() - began


def test_a_listen_connection_gone_silent_is_replaced_within_the_check_interval(
    pg_url: str, proxies: Callable[..., FaultProxy], caplog: pytest.LogCaptureFixture
) -> None:
    proxy = proxies()
    store = PostgresStore(proxy.url(pg_url), listen_check_interval=CHECK)
    heard: list[str] = []

    async def scenario() -> float:
        listener = asyncio.create_task(store.listen(heard.append))
        try:
            await until(lambda: heard == ["listening"], 15, "the listener to listen")
            await asyncio.to_thread(notify, pg_url, store, "before")
            await until(lambda: "before" in heard, 15, "a notification before the fault")
            assert proxy.freeze(b"LISTEN") == 1  # the server goes silent under the listener
            await asyncio.to_thread(notify, pg_url, store, "lost")
            replaced = await until(lambda: heard.count("listening") == 2, 15, "a new listening connection")
            await asyncio.to_thread(notify, pg_url, store, "after")
            await until(lambda: "after" in heard, 15, "a notification after the fault")
            return replaced
        finally:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)

    try:
        replaced = asyncio.run(scenario())
    finally:
        store.close()
    assert "lost" not in heard  # sent to the silent session: never delivered
    assert replaced < CHECK * 2 + 5.0  # one interval waiting, one for the answer (+ a loaded machine)
    warnings = [r.getMessage() for r in caplog.records if "LISTEN connection" in r.getMessage()]
    assert warnings == [
        "LISTEN connection did not answer its liveness check within 0.5 s; replacing it (wake-ups resume on a new one)"
    ]


def test_listen_check_interval_is_checked(pg_url: str) -> None:
    from rota.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="listen_check_interval must be a positive number of seconds, got 0"):
        PostgresStore(pg_url, listen_check_interval=0)
