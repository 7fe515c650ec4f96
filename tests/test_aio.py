"""The async client (rota.aio): the same operations as the sync one, awaited, never
blocking the event loop; and the async enqueue inside a psycopg AsyncConnection's transaction."""

from __future__ import annotations

import asyncio
import inspect
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

import rota
from rota.aio import CLIENT_OPERATIONS, TASK_OPERATIONS
from rota.stores.sqlite import sqlite_path

from .conftest import WITH_MYSQL, start_worker, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def _parameters(fn: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def test_sync_and_async_surfaces_expose_the_same_operations() -> None:
    app_async = {name[: -len("_async")] for name in dir(rota.App) if name.endswith("_async")}
    assert set(CLIENT_OPERATIONS) <= app_async
    for name in CLIENT_OPERATIONS:
        sync, asynchronous = getattr(rota.App, name), getattr(rota.App, f"{name}_async")
        assert inspect.iscoroutinefunction(asynchronous), name
        assert _parameters(sync) == _parameters(asynchronous), name
    for cls in (rota.Task, rota.TaskCall):
        for name in TASK_OPERATIONS:
            sync, asynchronous = getattr(cls, name), getattr(cls, f"{name}_async")
            assert inspect.iscoroutinefunction(asynchronous), (cls, name)
            assert _parameters(sync) == _parameters(asynchronous), (cls, name)
    # Every async method of App has its sync twin listed (run_worker_async and lock_async
    # are not client operations: they are the worker and the async lock context).
    assert app_async - set(CLIENT_OPERATIONS) == {"run_worker", "lock"}


def test_async_client_operations(app_factory: Callable[..., rota.App]) -> None:
    app = app_factory()

    @app.task(name="echo")
    def echo(x: int) -> int:
        return x

    @app.schedule(every=3600, name="hourly")
    def hourly() -> str:
        return "tick"

    app.prepare()

    async def scenario() -> None:
        first = await echo.enqueue_async(1)
        keyed = await echo.options(key="k", priority=2).enqueue_async(2)
        twin = await echo.options(key="k").enqueue_async(3)
        assert keyed.created and not twin.created and twin.id == keyed.id
        many = await echo.enqueue_many_async([((i,), {}) for i in range(3)])
        assert len(many) == 3
        assert (await app.get_run_async(first.id)).args == [1]
        assert [r.id for r in await app.list_runs_async(status="pending", task="echo", limit=2)] == many[:0:-1]
        cancelled = await app.cancel_async(first.id, "not needed")
        assert cancelled.status == "cancelled"
        again = await app.retry_async(first.id)
        assert (await app.get_run_async(again.id)).retry_of == first.id
        assert (await app.pause_async("hourly")).paused
        assert not (await app.resume_async("hourly")).paused
        triggered = await app.trigger_async("hourly")
        assert (await app.get_run_async(triggered.id)).schedule == "hourly"
        assert [s.name for s in await app.list_schedules_async()] == ["hourly"]
        assert (await app.get_schedule_async("hourly")).task == "hourly"
        assert await app.list_workers_async() == []
        stats = await app.stats_async()
        assert stats["runs"]["pending"] == 6 and stats["runs"]["cancelled"] == 1
        with pytest.raises(rota.RunNotFound):
            await app.get_run_async(10_000)

    asyncio.run(scenario())


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_async_operations_do_not_block_the_event_loop(app_factory: Callable[..., rota.App]) -> None:
    """While the SQLite write lock is held elsewhere, an awaited cancel waits for it in a
    thread: the loop keeps running other tasks meanwhile (the facade is the same for both
    stores; SQLite makes holding the lock easy)."""
    app = app_factory()

    @app.task(name="echo")
    def echo() -> None: ...

    handle = echo.enqueue()
    blocker = sqlite3.connect(sqlite_path(app.database_url), isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")

    async def scenario() -> int:
        ticks = 0
        cancel = asyncio.ensure_future(app.cancel_async(handle.id))
        while ticks < 20:
            await asyncio.sleep(0.01)
            ticks += 1
            assert not cancel.done()
        blocker.execute("COMMIT")
        assert (await cancel).status == "cancelled"
        return ticks

    try:
        assert asyncio.run(scenario()) == 20
    finally:
        blocker.close()


@pytest.mark.parametrize("db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
def test_async_psycopg_connection_enqueues_in_its_transaction(
    app_factory: Callable[..., rota.App], db_url: str
) -> None:
    app = app_factory(poll_interval=30.0)

    @app.task(name="welcome")
    def welcome(email: str) -> str:
        return f"hello {email}"

    app.migrate()
    start_worker(app)

    class Abort(Exception):
        pass

    async def scenario() -> tuple[str, list[str]]:
        conn = await psycopg.AsyncConnection.connect(db_url)
        async with conn:
            await conn.execute("CREATE TABLE signups (email text)")
            await conn.commit()
            with pytest.raises(rota.ConfigurationError, match="enqueue_async"):
                welcome.options(connection=conn).enqueue("sync@example.com")
            with pytest.raises(Abort):
                async with conn.transaction():
                    await conn.execute("INSERT INTO signups VALUES ('gone@example.com')")
                    await welcome.options(connection=conn).enqueue_async("gone@example.com")
                    await welcome.options(connection=conn, key="k").enqueue_async("gone@example.com")
                    raise Abort
            assert await app.list_runs_async() == []
            await asyncio.sleep(0.3)  # the worker is idle: only the commit's NOTIFY wakes it
            async with conn.transaction():
                await conn.execute("INSERT INTO signups VALUES ('kept@example.com')")
                kept = await welcome.options(connection=conn, key="k").enqueue_async("kept@example.com")
                twin = await welcome.options(connection=conn, key="k").enqueue_async("kept@example.com")
                assert kept.created and not twin.created and twin.id == kept.id
                many = await welcome.enqueue_many_async([(("b@example.com",), {})], connection=conn)
            run = await kept.wait_async(timeout=10)
            other = await rota.RunHandle(app, many[0]).wait_async(timeout=10)
            assert other.status == "succeeded"
            cur = await conn.execute("SELECT email FROM signups")
            return run.status, [r[0] for r in await cur.fetchall()]

    assert asyncio.run(scenario()) == ("succeeded", ["kept@example.com"])
    assert len(app.list_runs()) == 2


@pytest.mark.parametrize("db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
def test_sqlalchemy_async_session_enqueues_in_its_transaction(
    app_factory: Callable[..., rota.App], db_url: str
) -> None:
    pytest.importorskip("sqlalchemy")
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    app = app_factory()

    @app.task(name="welcome")
    def welcome(email: str) -> None: ...

    app.migrate()

    async def scenario() -> None:
        engine = create_async_engine(db_url.replace("postgresql://", "postgresql+psycopg://", 1))
        try:
            async with AsyncSession(engine) as session:
                await welcome.options(connection=session).enqueue_async("gone@example.com")
                await session.rollback()
            assert await app.list_runs_async() == []
            async with AsyncSession(engine) as session:
                await session.execute(text("SELECT 1"))
                kept = await welcome.options(connection=session).enqueue_async("kept@example.com")
                assert await app.list_runs_async() == []
                await session.commit()
            assert [r.id for r in await app.list_runs_async()] == [kept.id]
        finally:
            await engine.dispose()

    asyncio.run(scenario())


def test_enqueue_async_on_a_sync_connection_joins_its_transaction(
    app_factory: Callable[..., rota.App], db_url: str
) -> None:
    from .test_txn import caller_connection

    app = app_factory()

    @app.task(name="welcome")
    def welcome(email: str) -> None: ...

    app.migrate()

    async def scenario() -> list[str]:
        with caller_connection(db_url) as conn:
            await welcome.options(connection=conn).enqueue_async("gone@example.com")
            conn.rollback()
            assert await app.list_runs_async() == []
            ids = await welcome.enqueue_many_async([(("kept@example.com",), {})], connection=conn)
            conn.commit()
        return ids

    ids = asyncio.run(scenario())
    assert [r.id for r in app.list_runs()] == ids
