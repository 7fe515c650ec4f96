"""The store's token connection (review of ed05dfd) is used only by claims that found runs: at
an idle worker it sits unused while the pool's connections serve the polls, so it is the one a
server's wait_timeout or a proxy's idle cut closes. The next claim that found runs failed with
DatabaseUnavailable (the worker logged an outage and backed off); it opens a new one instead."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from . import mysql_db
from .conftest import MYSQL, MYSQL_URL, store_url


@pytest.fixture(params=[MYSQL])
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    yield from store_url(request, tmp_path)


def test_a_claim_after_the_idle_token_connection_was_cut_takes_its_tokens(app_factory: Any) -> None:
    app = app_factory()
    app.migrate()
    store = app.store
    task = app.task(name="t")(lambda x: x)
    task.enqueue(1)
    (first,) = store.claim("w", 1, None, 30.0)
    conn = mysql_db.admin(MYSQL_URL)
    try:
        with conn.cursor() as cur:
            cur.execute(f"KILL {store._token_conn.thread_id()}")  # as wait_timeout does
    finally:
        conn.close()
    task.enqueue(2)
    (second,) = store.claim("w", 1, None, 30.0)
    assert second.token > first.token
    store.close()
    assert store._token_conn is None
