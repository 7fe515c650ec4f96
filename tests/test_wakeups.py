"""Wake-ups: LISTEN/NOTIFY on PostgreSQL (rate-limited, never lost), in-process on SQLite."""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from typing import Any

import psycopg
from psycopg import sql

import rota
from rota.stores.postgres import PostgresStore

from .conftest import PG_URL, make_app, postgres_schema, start_worker


def channel_sql(app: rota.App) -> str:
    assert isinstance(app.store, PostgresStore)
    return app.store.queries["notify_channel"]


def listener(url: str, app: rota.App) -> psycopg.Connection[Any]:
    """A connection LISTENing on the channel of the schema `url` resolves rota's tables in."""
    conn = psycopg.connect(url, autocommit=True)
    row = conn.execute(channel_sql(app)).fetchone()
    assert row is not None
    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(row[0])))
    return conn


def test_bursts_of_enqueues_send_few_notifications_and_the_last_one_follows_the_last_commit(pg_url: str) -> None:
    app = make_app(pg_url)
    task = app.task(name="t")(lambda: None)
    with listener(pg_url, app) as conn:
        began = time.monotonic()
        for _ in range(300):
            task.enqueue()
        last_commit = time.monotonic()
        arrivals = []
        for note in conn.notifies(timeout=1.0):
            if note.payload == "run":
                arrivals.append(time.monotonic())
    # The limiter's promise: at most one NOTIFY per 5 ms window (leading or trailing), so the
    # count follows the burst's duration, not the number of enqueues (a fixed bound made this
    # test depend on how fast one enqueue commits).
    windows = (last_commit - began) / 0.005
    assert 1 <= len(arrivals) <= windows + 2 and len(arrivals) < 300, (len(arrivals), windows)
    assert arrivals[-1] >= last_commit - 0.001  # the trailing NOTIFY came after the last enqueue
    app.close()


def test_an_idle_worker_picks_up_a_new_run_without_waiting_for_its_poll(app: rota.App) -> None:
    task = app.task(name="stamp")(lambda: time.time())
    start_worker(app, poll_interval=30.0)
    time.sleep(0.5)  # idle, sleeping up to 30 s
    began = time.time()
    run = task.enqueue().wait(10)
    assert run.result - began < 2.0


def test_the_channel_is_rota_on_public_and_per_schema_elsewhere(pg_url: str) -> None:
    app = make_app(pg_url)
    long_name = "s" * 63  # PostgreSQL's longest identifier: rota:<schema> would be too long
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(long_name)))
        try:
            channels = {}
            # A search_path's first schema that does not exist is skipped: the tables resolve in public.
            for key, path in (("public", ["public"]), ("missing", ["rota_no_such", "public"]), ("long", [long_name])):
                conn.execute(sql.SQL("SET search_path TO {}").format(sql.SQL(", ").join(map(sql.Identifier, path))))
                channels[key] = conn.execute(channel_sql(app)).fetchone()
        finally:
            conn.execute("RESET search_path")
            conn.execute(sql.SQL("DROP SCHEMA {}").format(sql.Identifier(long_name)))
        with psycopg.connect(pg_url, autocommit=True) as own:
            schema = own.execute("SELECT current_schema()").fetchone()
            channel = own.execute(channel_sql(app)).fetchone()
    assert channels["public"] == ("rota",)  # the channel of earlier releases (rolling deploys)
    assert channels["missing"] == ("rota",)
    assert channels["long"] == ("rota:" + hashlib.md5(long_name.encode()).hexdigest(),)
    assert schema is not None and channel == (f"rota:{schema[0]}",)
    app.close()


def test_a_notify_in_one_schema_does_not_reach_a_listener_of_another(pg_url: str) -> None:
    with postgres_schema() as other_url:
        app, other = make_app(pg_url), make_app(other_url)
        task = app.task(name="t")(lambda: None)
        with listener(pg_url, app) as ours, listener(other_url, other) as theirs:
            task.enqueue()
            heard = [note.payload for note in ours.notifies(timeout=1.0, stop_after=1)]
            overheard = [note.payload for note in theirs.notifies(timeout=1.0)]
        app.close()
        other.close()
    assert heard == ["run"] and overheard == []


def test_cancelling_a_run_stops_it_in_its_schema_only_not_the_same_id_in_another(pg_url: str) -> None:
    with postgres_schema() as other_url:
        apps = [make_app(pg_url), make_app(other_url)]
        started = [threading.Event(), threading.Event()]
        handles, workers = [], []
        for app, event in zip(apps, started, strict=True):
            task = app.task(name="nap")(_nap(event))
            workers.append(start_worker(app, heartbeat_interval=0.2))
            handles.append(task.enqueue())
        assert handles[0].id == handles[1].id  # one sequence per schema: the same run id
        assert all(event.wait(10) for event in started)
        apps[0].cancel(handles[0].id)
        statuses = [handle.wait(10).status for handle in handles]
        for app, worker in zip(apps, workers, strict=True):
            worker.stop(wait=True, timeout=10)
            app.close()
    assert statuses == ["cancelled", "succeeded"]


def _nap(started: threading.Event) -> Any:
    async def nap() -> str:
        started.set()
        await asyncio.sleep(2.0)
        return "done"

    return nap
