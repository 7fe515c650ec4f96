"""Durable steps, bugs a new user reported (issue 43), on every store: a resumed wait keeps its
start; an async step cancelled by a hand-back is not a failed step; a wait's since and until
come from one clock reading; listings say a run is parked; a parked run shows its wait, not
an earlier attempt's error; a stale save waits for a rescue in flight and is refused; a
statement over MariaDB's max_allowed_packet is named as such, not as an outage."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

import rota
from rota.cli import main
from rota.durable import Durable
from rota.errors import DatabaseError, DatabaseTransient
from rota.stores.sqlite import sqlite_path

from .conftest import WITH_MYSQL, start_worker, store_url, wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def _parked(app: rota.App, run_id: str) -> bool:
    run = app.get_run(run_id)
    return run.status == "pending" and run.waiting is not None


def _t(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_a_resumed_wait_keeps_its_start_and_its_since_matches_its_timeout(app: rota.App) -> None:
    @app.task(name="waits", pass_context=True)
    def waits(ctx: rota.RunContext) -> str:
        ctx.wait_for("go", timeout=timedelta(hours=1))
        return "done"

    start_worker(app)
    ref = waits.enqueue()
    wait_for(lambda: _parked(app, ref.id), what="the park")
    wait = app.get_run(ref.id).waiting
    assert wait is not None
    assert abs((_t(wait["until"]) - _t(wait["since"])).total_seconds() - 3600) < 0.0005  # one clock reading
    time.sleep(1.0)
    app.signal(ref.id, "go")
    assert ref.wait(15).status == "succeeded"
    (step,) = [s for s in app.get_run(ref.id).steps if s["name"] == "wait:go"]
    assert abs((_t(step["started_at"]) - _t(wait["since"])).total_seconds()) < 0.5  # the wait's start, kept
    assert (_t(step["finished_at"]) - _t(step["started_at"])).total_seconds() >= 0.9


def test_an_async_step_cancelled_by_a_hand_back_is_not_saved_as_failed(app: rota.App) -> None:
    app.task(name="held")(lambda: None).enqueue()
    (claim,) = app.store.claim("w1", 1, None, 30.0, 1)
    durable = Durable(app.store, claim.id, claim.token, "held", steps=claim.steps)

    async def body() -> None:
        task = asyncio.create_task(durable.step_async("slow", asyncio.sleep, (30,), {}))
        await asyncio.sleep(0.2)
        task.cancel()  # what a shutdown's hand-back does to an async handler
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(body())
    assert app.store.steps_of(claim.id) == []  # not saved: it runs again on resume


def test_listings_say_a_run_is_parked(app: rota.App) -> None:
    @app.task(name="waiter", pass_context=True)
    def waiter(ctx: rota.RunContext) -> None:
        ctx.wait_for("paid", timeout=3600)

    @app.task(name="sleeper", pass_context=True)
    def sleeper(ctx: rota.RunContext) -> None:
        ctx.sleep(3600)

    plain = app.task(name="plain")(lambda: None).options(delay=3600).enqueue()
    start_worker(app)
    a, b = waiter.enqueue(), sleeper.enqueue()
    wait_for(lambda: _parked(app, a.id) and _parked(app, b.id), what="the parks")
    calls: list[Any] = []
    one = app.store.wait_of
    app.store.wait_of = lambda *args: calls.append(args) or one(*args)  # type: ignore[method-assign]
    runs = {r.id: r for r in app.list_runs()}
    assert calls == []  # no query per row: one for the page (waits_of)
    assert runs[a.id].waiting is not None and runs[a.id].waiting["signal"] == "paid"
    assert runs[b.id].waiting is not None and runs[b.id].waiting["kind"] == "sleep"
    assert runs[plain.id].waiting is None
    cli = CliRunner()
    out = cli.invoke(main, ["--database-url", app.store.url, "runs"], terminal_width=250)
    assert out.exit_code == 0, out.output
    assert "pending (parked: signal 'paid')" in out.output and "pending (parked: sleep, ends in " in out.output
    assert "until in" not in out.output, out.output  # it read 'sleep until in 60 min
    listed = json.loads(cli.invoke(main, ["--database-url", app.store.url, "runs", "--json"]).output)
    assert {i["id"]: i.get("waiting", {}).get("kind") for i in listed} == {
        a.id: "signal",
        b.id: "sleep",
        plain.id: None,
    }
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from rota.web import create_app

    with TestClient(create_app(app), base_url="http://localhost") as web:
        items = {i["id"]: i for i in web.get("/api/runs").json()}
    assert items[a.id]["waiting"]["signal"] == "paid" and items[b.id]["waiting"]["kind"] == "sleep"
    assert "waiting" not in items[plain.id]


def test_a_parked_run_rescued_before_shows_its_wait_not_the_old_error(app: rota.App) -> None:
    @app.task(name="lost_waiter", pass_context=True, retries=2)
    def lost_waiter(ctx: rota.RunContext) -> None:
        ctx.wait_for("go", timeout=3600)

    ref = lost_waiter.enqueue()
    assert len(app.store.claim("dead-worker", 1, None, 0.2, 1)) == 1
    time.sleep(0.5)
    assert len(app.store.rescue()) == 1
    assert app.get_run(ref.id).error["type"] == "WorkerLost"
    start_worker(app)
    wait_for(lambda: _parked(app, ref.id), what="the park")
    run = app.get_run(ref.id)
    assert run.error is None  # the wait, not the lost attempt's error (kept in the history)
    assert [a["status"] for a in run.attempts] == ["lost"]
    out = CliRunner().invoke(main, ["--database-url", app.store.url, "runs"], terminal_width=250)
    assert "WorkerLost" not in out.output and "parked: signal 'go'" in out.output


def _holder(url: str) -> Any:
    """A connection of the test's own, to hold a rescue's transaction open."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(sqlite_path(url), isolation_level=None, timeout=30)
        conn.execute("BEGIN IMMEDIATE")
        return conn
    if url.startswith("mysql"):
        from .test_txn import mysql_connection

        my = mysql_connection(url)
        my.begin()
        return my
    return psycopg.connect(url)


@pytest.mark.parametrize("how", ["batch", "one"])
def test_a_stale_save_waits_for_a_rescue_in_flight_and_is_refused(app: rota.App, how: str) -> None:
    app.task(name="held")(lambda: None).enqueue()
    (claim,) = app.store.claim("w1", 1, None, 30.0, 1)
    conn = _holder(app.store.url)
    mark = "?" if isinstance(conn, sqlite3.Connection) else "%s"
    # a rescue and a new claim, in flight: the run's token changes, not yet committed
    conn.execute(f"UPDATE rota_runs SET token = token + 1000 WHERE id = {mark}", (claim.id,))
    row = {"id": claim.id, "token": claim.token, "name": "s", "seq": 0, "took": 0.0, "outcome": "succeeded",
           "result": "1", "error": None}  # fmt: skip
    got: list[Any] = []
    save = app.store._save_batch if how == "batch" else app.store._save_one
    saver = threading.Thread(target=lambda: got.append(save([row]) if how == "batch" else save(row)))
    saver.start()
    time.sleep(0.5)
    conn.commit()
    saver.join(30)
    conn.close()
    assert got == [set() if how == "batch" else False]  # refused: the token changed before it committed
    assert app.store.steps_of(claim.id) == []


def test_a_payload_over_max_allowed_packet_is_named_not_an_outage(app: rota.App) -> None:
    if not app.store.url.startswith("mysql"):
        pytest.skip("MySQL/MariaDB's max_allowed_packet")
    with app.store._read() as s:
        limit = int(s.q_text("SELECT @@max_allowed_packet")[0][0])

    @app.task(name="big", pass_context=True)
    def big(ctx: rota.RunContext, data: str = "") -> None:
        ctx.wait_for("x", timeout=60)

    ref = big.enqueue()
    for size in (limit + 100, limit * 2):
        started = time.monotonic()
        with pytest.raises(DatabaseError, match="max_allowed_packet") as info:
            app.signal(ref.id, "x", "a" * size)
        assert not isinstance(info.value, DatabaseTransient) and "connection is closed" not in str(info.value)
        assert f"{size:,}"[:4] in str(info.value) and time.monotonic() - started < 10  # its size; no retry loop
    with pytest.raises(DatabaseError, match="max_allowed_packet"):
        big.enqueue("b" * (limit + 100))
    assert app.signal(ref.id, "x", "small").stored  # the store works on
