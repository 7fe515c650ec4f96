"""Uniqueness windows (issue 20): `.options(key=, unique_for=)` on SQLite and PostgreSQL.

A keyed enqueue with `unique_for` returns the key's run created within the window, in any
status but cancelled (created=False); without `unique_for` only a pending or running twin
counts, as before. Atomic under concurrent enqueues and inside a caller's transaction."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

import rota
from rota.stores.base import Outcome

from .conftest import WITH_MYSQL, make_app, store_url
from .test_txn import caller_connection


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


TEN_MINUTES = timedelta(minutes=10)


def sync_app(url: str, clock: rota.FakeClock) -> tuple[rota.App, rota.Task[..., Any]]:
    app = make_app(url, clock=clock)

    @app.task(name="sync")
    def sync(n: int) -> int:
        return n

    app.migrate()
    return app, sync


def finish(app: rota.App, run_id: str, status: str) -> None:
    (claimed,) = [c for c in app.store.claim("w", 10, None, 30) if str(c.id) == run_id]
    assert app.store.finish([Outcome(claimed.id, claimed.token, status)]) == {claimed.id}


@pytest.mark.parametrize("status", ["pending", "running", "succeeded", "failed", "skipped"])
def test_a_run_created_within_the_window_is_returned_in_any_status_but_cancelled(
    db_url: str, clock: rota.FakeClock, status: str
) -> None:
    app, sync = sync_app(db_url, clock)
    first = sync.options(key="sync:42", unique_for=TEN_MINUTES).enqueue(42)
    assert first.created
    if status == "running":
        app.store.claim("w", 10, None, 30)
    elif status == "skipped":  # (rota skips only schedule ticks: any statement ending the twin so counts)
        with app.store._tx() as s:  # type: ignore[attr-defined]
            s.q_text(f"UPDATE rota_runs SET status = 'skipped', finished_at = due_at WHERE id = {int(first.id)}")
        assert first.refresh().status == "skipped"
    elif status != "pending":
        finish(app, first.id, status)
    clock.advance(9 * 60)
    again = sync.options(key="sync:42", unique_for=TEN_MINUTES).enqueue(42)
    assert (again.id, again.created) == (first.id, False)
    assert [r.id for r in app.list_runs()] == [first.id]
    app.close()


def test_a_cancelled_run_or_an_expired_window_lets_a_new_run_be_created(db_url: str, clock: rota.FakeClock) -> None:
    app, sync = sync_app(db_url, clock)
    first = sync.options(key="k", unique_for=60).enqueue(1)
    assert app.cancel(first.id).status == "cancelled"
    second = sync.options(key="k", unique_for=60).enqueue(1)
    assert second.created and second.id != first.id
    finish(app, second.id, "succeeded")
    clock.advance(59)
    assert sync.options(key="k", unique_for=60).enqueue(1).id == second.id
    clock.advance(2)
    third = sync.options(key="k", unique_for=60).enqueue(1)
    assert third.created and third.id not in (first.id, second.id)
    # other keys and other tasks are unaffected
    assert sync.options(key="other", unique_for=60).enqueue(1).created
    app.close()


def test_without_unique_for_only_a_pending_or_running_twin_counts(db_url: str, clock: rota.FakeClock) -> None:
    app, sync = sync_app(db_url, clock)
    first = sync.options(key="k").enqueue(1)
    assert sync.options(key="k").enqueue(1).id == first.id
    finish(app, first.id, "succeeded")
    second = sync.options(key="k").enqueue(1)
    assert second.created and second.id != first.id
    # a window counts the runs enqueued with one: the pending twin is still returned
    assert sync.options(key="k", unique_for=60).enqueue(1).id == second.id
    finish(app, second.id, "succeeded")  # created within the window: still returned
    assert sync.options(key="k", unique_for=60).enqueue(1).id == second.id
    clock.advance(61)
    third = sync.options(key="k", unique_for=60).enqueue(1)
    assert third.created
    assert sync.options(key="k", unique_for=60).enqueue(1).id == third.id
    app.close()


def test_an_old_run_still_pending_is_returned_after_its_window(db_url: str, clock: rota.FakeClock) -> None:
    """Past the window the pending/running rule still holds: never two active runs per key."""
    app, sync = sync_app(db_url, clock)
    first = sync.options(key="k", unique_for=60).enqueue(1)
    clock.advance(120)
    twin = sync.options(key="k", unique_for=60).enqueue(1)
    assert (twin.id, twin.created) == (first.id, False)
    finish(app, first.id, "succeeded")
    assert sync.options(key="k", unique_for=60).enqueue(1).created
    app.close()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "unique_for must be a positive number of seconds"),
        (0, "unique_for must be a positive number of seconds"),
        (timedelta(0), "unique_for must be a positive number of seconds"),
        ("10m", "unique_for must be a positive number of seconds"),
        (True, "unique_for must be a positive number of seconds"),
        (float("inf"), "unique_for must be a positive number of seconds"),
    ],
)
def test_bad_unique_for_values_fail_with_one_clear_line(app: rota.App, value: object, message: str) -> None:
    @app.task(name="t")
    def t() -> None: ...

    with pytest.raises(rota.ConfigurationError, match=message) as info:
        t.options(key="k", unique_for=value)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_unique_for_needs_a_key(app: rota.App) -> None:
    @app.task(name="t")
    def t() -> None: ...

    with pytest.raises(rota.ConfigurationError, match="unique_for needs a key"):
        t.options(unique_for=60)


def test_concurrent_enqueues_of_one_key_create_one_run(app_factory: Callable[..., rota.App]) -> None:
    app = app_factory()

    @app.task(name="sync")
    def sync(n: int) -> int:
        return n

    app.migrate()
    barrier = threading.Barrier(8)
    handles: list[rota.RunHandle] = []

    def enqueue() -> None:
        barrier.wait()
        for _ in range(5):
            handles.append(sync.options(key="race", unique_for=600).enqueue(1))

    threads = [threading.Thread(target=enqueue) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(handles) == 40 and len({h.id for h in handles}) == 1
    assert sum(h.created for h in handles) == 1
    assert len(app.list_runs()) == 1


def test_unique_for_inside_a_caller_s_transaction(app_factory: Callable[..., rota.App], db_url: str) -> None:
    app = app_factory()

    @app.task(name="sync")
    def sync(n: int) -> int:
        return n

    app.migrate()
    with caller_connection(db_url) as conn:
        first = sync.options(connection=conn, key="k", unique_for=600).enqueue(1)
        twin = sync.options(connection=conn, key="k", unique_for=600).enqueue(1)
        assert first.created and (twin.id, twin.created) == (first.id, False)
        conn.rollback()  # the run and the key's record go together
        again = sync.options(connection=conn, key="k", unique_for=600).enqueue(1)
        assert again.created
        conn.commit()
    assert app.cancel(again.id).status == "cancelled"
    outside = sync.options(key="k", unique_for=600).enqueue(1)
    assert outside.created and outside.id != again.id


@pytest.mark.parametrize("first_ends", ["commit", "rollback"])
def test_two_caller_transactions_racing_one_key_make_one_run(
    app_factory: Callable[..., rota.App], db_url: str, first_ends: str
) -> None:
    """The second caller's keyed enqueue waits for the first caller's transaction: it gets
    the first's run once that commits, or makes its own if that rolls back."""
    app = app_factory()

    @app.task(name="sync")
    def sync(n: int) -> int:
        return n

    app.migrate()
    got: list[rota.RunHandle] = []

    def second_caller() -> None:  # its own connection, on its own thread (as sqlite3 wants)
        with caller_connection(db_url) as two:
            got.append(sync.options(connection=two, key="k", unique_for=600).enqueue(2))
            two.commit()

    with caller_connection(db_url) as one:
        first = sync.options(connection=one, key="k", unique_for=600).enqueue(1)
        racer = threading.Thread(target=second_caller)
        racer.start()
        racer.join(0.5)
        assert racer.is_alive(), "the second enqueue did not wait for the first transaction"
        getattr(one, first_ends)()
        racer.join(10)
    (second,) = got
    if first_ends == "commit":
        assert first.created and (second.id, second.created) == (first.id, False)
        assert [r.id for r in app.list_runs()] == [first.id]
    else:
        assert second.created and [r.args for r in app.list_runs()] == [[2]]


def test_unique_for_with_the_async_api(app: rota.App) -> None:
    @app.task(name="sync")
    def sync(n: int) -> int:
        return n

    app.migrate()

    async def both() -> tuple[rota.RunHandle, rota.RunHandle]:
        call = sync.options(key="k", unique_for=600)
        return await call.enqueue_async(1), await call.enqueue_async(1)

    first, second = asyncio.run(both())
    assert first.created and (second.id, second.created) == (first.id, False)


def test_pruning_a_run_drops_its_key_s_record(db_url: str, clock: rota.FakeClock) -> None:
    app, sync = sync_app(db_url, clock)
    first = sync.options(key="k", unique_for=600).enqueue(1)
    finish(app, first.id, "succeeded")
    clock.advance(10)
    assert app.store.prune("succeeded", 5, 100) == 1
    with app.store._read() as s:  # type: ignore[attr-defined]
        assert s.q_text("SELECT count(*) FROM rota_unique")[0][0] == 0
    assert sync.options(key="k", unique_for=600).enqueue(1).created
    app.close()
