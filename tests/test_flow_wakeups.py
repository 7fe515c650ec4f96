"""A freed limit slot wakes the workers (PostgreSQL: NOTIFY from the rota_limit_freed trigger,
schema 0010): every way a limited run stops running wakes them, at once, not at their next
poll."""

from __future__ import annotations

import json
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


def _trigger_calls(conn: Any) -> int:
    """rota_limit_freed's calls in this transaction (track_functions set for it)."""
    row = conn.execute("SELECT pg_stat_get_xact_function_calls('rota_limit_freed'::regproc)").fetchone()
    return int(row[0] or 0)


def test_a_finish_wakes_the_workers_once_per_batch_not_through_the_trigger_per_run(pg_url: str) -> None:
    """Schema 0016: the finish statements send the wake-up themselves, once, and the trigger's
    WHEN skips their rows (its plpgsql call per run cost the limited drain ~8 µs a run); a
    statement that does not (here a plain UPDATE, as a later one might be) still fires it."""
    app, claimed = _claimed(pg_url, 4)
    store: Any = app.store
    rows = json.dumps([[c.id, c.token, "1", None] for c in claimed[:3]])
    with psycopg.connect(pg_url) as conn, listener(pg_url, app) as heard:
        conn.execute("SET LOCAL track_functions = 'pl'")
        written = conn.execute(store.queries["finish_succeeded"], {"rows": rows, "now": None}).fetchall()
        assert len(written) == 3 and _trigger_calls(conn) == 0
        conn.commit()
        assert [n.payload for n in heard.notifies(timeout=1.0, stop_after=1)] == ["run"]
        conn.execute("SET LOCAL track_functions = 'pl'")  # a new transaction: the finish's word is gone
        conn.execute("UPDATE rota_runs SET status = 'cancelled' WHERE id = %s", (claimed[3].id,))
        assert _trigger_calls(conn) == 1
        conn.commit()
        assert [n.payload for n in heard.notifies(timeout=1.0, stop_after=1)] == ["run"]
    app.close()


def test_a_finish_of_plain_runs_alone_sends_no_wake_up_for_a_limit(pg_url: str) -> None:
    app = make_app(pg_url)
    task = app.task(name="plain")(lambda i: i)
    app.task(name="limited", limit=2)(lambda i: i)
    app.migrate()
    app.prepare()
    task.enqueue_many([((i,), {}) for i in range(3)])
    claimed = app.store.claim(OWNER, 3, None, 30.0)
    with listener(pg_url, app) as conn:
        app.store.finish([Outcome(c.id, c.token, "succeeded", result="1") for c in claimed])
        heard = [note.payload for note in conn.notifies(timeout=0.3)]
    app.close()
    assert heard == []
