"""A freed limit slot wakes the workers (PostgreSQL: NOTIFY from the rota_limit_freed trigger,
schema 0010, made once per transaction by 0015): every way a limited run stops running wakes
them, and a batch of such runs calls the trigger's function once, not once per run."""

from __future__ import annotations

import time
from typing import Any

import psycopg
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


def test_a_batch_of_freed_slots_calls_the_trigger_once_per_transaction(pg_url: str) -> None:
    """0010's trigger called its PL/pgSQL function once per freed run (about a fifth of a
    limited finish's time), to queue the same NOTIFY each time."""
    app, claimed = _claimed(pg_url, 5)
    ids = [c.id for c in claimed]
    with psycopg.connect(pg_url) as conn:
        conn.execute("SET LOCAL track_functions = 'pl'")  # (superuser: the tests' role)
        update = "UPDATE rota_runs SET status = 'cancelled', finished_at = now(), lease_until = NULL WHERE id = ANY(%s)"
        conn.execute(update, (ids[:3],))  # two statements in one transaction
        conn.execute(update, (ids[3:],))
        row = conn.execute("SELECT pg_stat_get_xact_function_calls('rota_limit_freed'::regproc)").fetchone()
        conn.rollback()
    app.close()
    assert row == (1,)
