"""The harness itself: the proxy's controls do what the scenarios rely on."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from ..conftest import PG_URL, require
from .proxy import FaultProxy

pytestmark = pytest.mark.postgres


def query(url: str, timeout: float = 2.0) -> int:
    import psycopg

    with psycopg.connect(url, connect_timeout=max(1, round(timeout))) as conn:
        row = conn.execute("SELECT 1").fetchone()
    assert row is not None
    return int(row[0])


def run_in_thread(conn: psycopg.Connection[Any], sql: str) -> threading.Event:
    """Run `sql` on a thread; the event is set once it answered."""
    answered = threading.Event()

    def go() -> None:
        conn.execute(sql)
        answered.set()

    threading.Thread(target=go, daemon=True).start()
    return answered


def test_proxy_forwards_cuts_blackholes_holds_and_restores(proxies: Callable[..., FaultProxy]) -> None:
    require("postgres")
    proxy = proxies()
    url = proxy.url(PG_URL)
    assert query(url) == 1
    conn = psycopg.connect(url, autocommit=True)
    try:
        proxy.cut()
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
        with pytest.raises(psycopg.OperationalError):
            query(url)  # refused while cut
    finally:
        conn.close()
    proxy.blackhole()
    began = time.monotonic()
    with pytest.raises(psycopg.OperationalError):
        query(url, timeout=1)  # accepted, never answered: the connect timeout ends it
    assert time.monotonic() - began >= 0.9
    proxy.restore()
    assert query(url) == 1

    conn = psycopg.connect(url, autocommit=True)
    try:
        proxy.hold()
        answered = run_in_thread(conn, "SELECT 1")
        assert not answered.wait(1.0), "a held connection answered"
        proxy.restore()
        assert answered.wait(5), "the held query did not complete after restore"
    finally:
        conn.close()

    proxy.hold_after(b"rota-trigger-marker")
    conn = psycopg.connect(url, autocommit=True)
    try:
        conn.execute("SELECT 1")  # no marker: forwarded
        answered = run_in_thread(conn, "SELECT 'rota-trigger-marker'")
        assert proxy.triggered.wait(5)
        assert not answered.wait(0.5), "traffic flowed after the trigger"
        proxy.restore()
        assert answered.wait(5)
    finally:
        conn.close()
