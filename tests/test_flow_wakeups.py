"""A freed limit slot wakes the workers (PostgreSQL: NOTIFY from the rota_limit_freed trigger,
schema 0010): every way a limited run stops running wakes them, at once, not at their next
poll."""

from __future__ import annotations

import time
from typing import Any

import pytest

import rota
from rota.stores.base import Outcome

from .conftest import make_app
from .test_wakeups import listener

OWNER = "w"


def _claimed(pg_url: str, n: int, lease: float = 30.0) -> tuple[rota.App, list[Any]]:
    app = make_app(pg_url)
    task = app.task(name="limited", limit=n)(lambda i: i)
    app.migrate()
    app.prepare()  # stores the limit, as a worker's start does
    task.enqueue_many([((i,), {}) for i in range(n)])
    claimed = app.store.claim(OWNER, n, None, lease)
    assert len(claimed) == n
    return app, claimed


def _end(store: Any, claimed: list[Any], end: str) -> None:
    error = '{"type":"E","message":"m"}'
    if end == "succeeded":
        store.finish([Outcome(c.id, c.token, "succeeded", result="1") for c in claimed])
    elif end == "failed":
        store.finish([Outcome(c.id, c.token, "failed", error=error, history="{}") for c in claimed])
    elif end == "retry":
        store.finish([Outcome(c.id, c.token, "pending", error=error, retry_in=60.0, history="{}") for c in claimed])
    elif end == "cancelled":
        store.finish([Outcome(c.id, c.token, "cancelled", history="{}") for c in claimed])
    elif end == "hand_back":
        store.hand_back([(c.id, c.token) for c in claimed], "test")
    else:
        time.sleep(0.05)  # the lease (10 ms) has run out
        assert sorted(r.id for r in store.rescue()) == sorted(c.id for c in claimed)


@pytest.mark.parametrize("end", ["succeeded", "failed", "retry", "cancelled", "hand_back", "rescue"])
def test_every_way_a_limited_run_stops_running_wakes_the_workers(pg_url: str, end: str) -> None:
    app, claimed = _claimed(pg_url, 3, lease=0.01 if end == "rescue" else 30.0)
    with listener(pg_url, app) as conn:
        _end(app.store, claimed, end)
        heard = [note.payload for note in conn.notifies(timeout=1.0, stop_after=1)]
    app.close()
    assert heard == ["run"]
