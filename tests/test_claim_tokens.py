"""Fencing tokens of claims that run at the same time (issue 42 item 4). On MySQL/MariaDB a
claim took its tokens from the counter's row inside its transaction and held that row lock
to its commit: a second process's claim waited for the whole first claim (two workers drained
slower than one). Now the tokens are taken by one statement committed on its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from rota.stores.base import Claimed

from .conftest import WITH_MYSQL, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    yield from store_url(request, tmp_path)


def test_a_claim_held_open_does_not_hold_up_another_process_claim(app_factory: Any, db_url: str) -> None:
    if not db_url.startswith("mysql"):
        pytest.skip("PostgreSQL takes tokens from a sequence; SQLite has one writer at a time")
    first, second = app_factory(), app_factory()
    task = first.task(name="t")(lambda x: x)
    second.task(name="t")(lambda x: x)
    handles = [task.enqueue(i) for i in range(4)]
    store = first.store
    locked, release = threading.Event(), threading.Event()
    original = store._claim

    def held_open(s: Any, *args: Any, **kwargs: Any) -> Any:
        rows = original(s, *args, **kwargs)
        locked.set()  # its runs locked and its tokens taken; not committed yet
        release.wait(15)
        return rows

    store._claim = held_open
    out: list[list[Claimed]] = []
    claimer = threading.Thread(target=lambda: out.append(store.claim("a", 2, None, 30.0)))
    claimer.start()
    try:
        assert locked.wait(10)
        began = time.monotonic()
        theirs = second.store.claim("b", 2, None, 30.0)
        waited = time.monotonic() - began
    finally:
        release.set()
        claimer.join(20)
    assert waited < 2.0, waited  # before: the counter's row lock, to the first claim's commit
    mine = out[0]
    assert sorted(c.id for c in mine + theirs) == sorted(int(h.id) for h in handles)
    tokens = [c.token for c in mine + theirs]
    assert len(set(tokens)) == 4
    assert min(c.token for c in theirs) > max(c.token for c in mine)  # taken after
