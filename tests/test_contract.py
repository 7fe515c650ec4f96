"""The store contract: the same tests against SQLite and PostgreSQL (see conftest.db_url)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

import rota
from rota.stores.base import Outcome
from rota.stores.sqlstore.queries import latest_version, load_migrations

from .conftest import MYSQL, THROUGH_BOUNCER, make_app, store_url


@pytest.fixture(params=[*THROUGH_BOUNCER, MYSQL])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Each test here once per store, and once more through a transaction-mode PgBouncer."""
    yield from store_url(request, tmp_path)


def test_enqueue_records_a_pending_run(app: rota.App) -> None:
    @app.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    handle = add.enqueue(1, b=2)
    run = handle.refresh()
    assert run.id == handle.id and isinstance(run.id, str)
    assert (run.task, run.status, run.args, run.kwargs) == ("add", "pending", [1], {"b": 2})
    assert run.attempt == 0 and run.max_attempts == 1 and run.queue == "default"
    assert abs((run.scheduled_for - datetime.now(UTC)).total_seconds()) < 5
    assert app.list_runs(status="pending") == [run]


def test_options_delay_run_at_priority_queue(app: rota.App, clock: rota.FakeClock) -> None:
    app = make_app(app.database_url, clock=clock)

    @app.task(name="t")
    def t() -> None: ...

    later = t.options(delay=timedelta(seconds=30)).enqueue().refresh()
    assert later.scheduled_for == clock.now() + timedelta(seconds=30)
    when = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    at = t.options(run_at=when, priority=7, queue="mail").enqueue().refresh()
    assert (at.scheduled_for, at.priority, at.queue) == (when, 7, "mail")
    assert app.store.claim("w", 10, None, 30) == []  # nothing is due yet
    clock.advance(31)
    assert [c.id for c in app.store.claim("w", 10, None, 30)] == [int(later.id)]
    app.close()


def test_bad_enqueue_options_fail_clearly(app: rota.App) -> None:
    @app.task(name="t")
    def t() -> None: ...

    with pytest.raises(rota.ConfigurationError, match="either delay or run_at"):
        t.options(delay=1, run_at=datetime.now(UTC))
    with pytest.raises(rota.ConfigurationError, match="has no time zone"):
        t.options(run_at=datetime(2030, 1, 1))
    with pytest.raises(rota.ConfigurationError, match="delay must be a non-negative"):
        t.options(delay=-1)
    with pytest.raises(rota.ConfigurationError, match="invalid queue name 'has space'"):
        t.options(queue="has space")
    with pytest.raises(rota.ConfigurationError, match="priority must be an integer"):
        t.options(priority="high")  # type: ignore[arg-type]
    with pytest.raises(rota.ConfigurationError, match="timeout must be a positive number of seconds"):
        app.task(name="neg", timeout=-1)(lambda: None)
    assert app.list_runs() == []  # nothing half-enqueued


def test_non_json_argument_is_refused_naming_it(app: rota.App) -> None:
    @app.task(name="t")
    def t(*args: object, **kwargs: object) -> None: ...

    with pytest.raises(rota.SerializationError, match=r"argument 'when' of t\(\) is a datetime.datetime"):
        t.enqueue(1, when=datetime.now(UTC))
    with pytest.raises(rota.SerializationError, match=r"argument 1 of t\(\)\[1\] is a decimal.Decimal"):
        t.enqueue([1, Decimal("2")])
    with pytest.raises(rota.SerializationError, match="nan"):
        t.enqueue(float("nan"))
    with pytest.raises(rota.SerializationError, match="key 1 of type int"):
        t.enqueue({1: "x"})
    assert app.list_runs() == []


def test_key_deduplicates_while_pending_or_running(app: rota.App) -> None:
    @app.task(name="welcome")
    def welcome(user: int) -> None: ...

    first = welcome.options(key="welcome:42").enqueue(42)
    again = welcome.options(key="welcome:42").enqueue(42)
    other = welcome.options(key="welcome:43").enqueue(43)
    assert first.created and not again.created and again.id == first.id
    assert other.id != first.id
    (claimed,) = [c for c in app.store.claim("w", 10, None, 30) if str(c.id) == first.id]
    assert welcome.options(key="welcome:42").enqueue(42).id == first.id  # running still dedups
    app.store.finish([Outcome(claimed.id, claimed.token, "succeeded", result="null")])
    fresh = welcome.options(key="welcome:42").enqueue(42)
    assert fresh.created and fresh.id != first.id


def test_claim_order_is_priority_then_due_time_then_enqueue_order(app: rota.App, clock: rota.FakeClock) -> None:
    app = make_app(app.database_url, clock=clock)

    @app.task(name="t")
    def t(tag: str) -> None: ...

    t.options(run_at=clock.now() - timedelta(seconds=5)).enqueue("old-low")
    t.enqueue("new-low-1")
    t.enqueue("new-low-2")
    t.options(priority=10).enqueue("high")
    t.options(priority=-1, run_at=clock.now() - timedelta(seconds=60)).enqueue("oldest-negative")
    order = []
    while claimed := app.store.claim("w", 1, None, 30):
        order += [app.get_run(c.id).args[0] for c in claimed]
    assert order == ["high", "old-low", "new-low-1", "new-low-2", "oldest-negative"]
    app.close()


def test_claim_sets_owner_token_and_lease_from_the_store_clock(app: rota.App, clock: rota.FakeClock) -> None:
    app = make_app(app.database_url, clock=clock)

    @app.task(name="t")
    def t() -> None: ...

    ids = t.enqueue_many([((), {})] * 3)
    first = app.store.claim("worker-a", 2, None, 30)
    second = app.store.claim("worker-b", 5, None, 30)
    assert len(first) == 2 and len(second) == 1
    assert {str(c.id) for c in first + second} == set(ids)
    assert first[0].token < second[0].token
    assert app.store.claim("worker-c", 5, None, 30) == []
    run = app.get_run(first[0].id)
    assert (run.status, run.worker, run.token, run.attempt) == (
        "running",
        "worker-a",
        first[0].token,
        1,
    )
    assert run.lease_until == clock.now() + timedelta(seconds=30)
    app.close()


def test_queues_filter_claims(app: rota.App) -> None:
    @app.task(name="t", queue="mail")
    def t() -> None: ...

    t.enqueue()
    t.options(queue="reports").enqueue()
    assert [c.task for c in app.store.claim("w", 10, ["other"], 30)] == []
    assert len(app.store.claim("w", 10, ["reports", "x"], 30)) == 1
    assert len(app.store.claim("w", 10, None, 30)) == 1


def test_finish_is_conditioned_on_the_token(app: rota.App) -> None:
    @app.task(name="t")
    def t() -> None: ...

    t.enqueue()
    (c,) = app.store.claim("w", 1, None, 30)
    assert app.store.finish([Outcome(c.id, c.token + 1, "succeeded", result="1")]) == set()
    assert app.get_run(c.id).status == "running"
    assert app.store.finish([Outcome(c.id, c.token, "succeeded", result="2")]) == {c.id}
    run = app.get_run(c.id)
    assert (run.status, run.result) == ("succeeded", 2)
    assert app.store.finish([Outcome(c.id, c.token, "failed", error='{"type": "X"}')]) == set()
    assert app.get_run(c.id).status == "succeeded"


def test_stale_token_is_refused_after_rescue(app: rota.App, clock: rota.FakeClock) -> None:
    app = make_app(app.database_url, clock=clock)

    @app.task(name="t", retries=1)
    def t() -> None: ...

    t.enqueue()
    (old,) = app.store.claim("dead-worker", 1, None, 10)
    assert app.store.rescue() == []  # lease still valid
    clock.advance(11)
    (rescued,) = app.store.rescue()
    assert rescued.status == "pending" and "dead-worker was lost" in rescued.message
    assert app.store.heartbeat([(old.id, old.token)], 10) == (set(), set())
    (new,) = app.store.claim("live-worker", 1, None, 10)
    assert new.id == old.id and new.token > old.token and new.attempt == 2
    assert app.store.finish([Outcome(old.id, old.token, "succeeded", result='"stale"')]) == set()
    assert app.store.finish([Outcome(new.id, new.token, "succeeded", result='"fresh"')]) == {new.id}
    run = app.get_run(new.id)
    assert (run.result, run.worker, run.attempt) == ("fresh", "live-worker", 2)
    assert [a["status"] for a in run.attempts] == ["lost", "succeeded"]
    app.close()


def test_rescue_without_attempts_left_fails_naming_the_worker(app: rota.App, clock: rota.FakeClock) -> None:
    app = make_app(app.database_url, clock=clock)

    @app.task(name="t")
    def t() -> None: ...

    t.enqueue()
    (c,) = app.store.claim("host-x:123", 1, None, 5)
    clock.advance(6)
    (r,) = app.store.rescue()
    run = app.get_run(c.id)
    assert run.status == "failed" and r.status == "failed"
    assert run.error is not None and run.error["type"] == "WorkerLost"
    assert "worker host-x:123 was lost: its lease expired at" in run.error["message"]
    assert "(attempt 1 of 1)" in run.error["message"]
    assert [a["status"] for a in run.attempts] == ["lost"]  # as a lost attempt before a retry is
    app.close()


def test_heartbeat_extends_only_held_leases_and_reports_cancellation(app: rota.App, clock: rota.FakeClock) -> None:
    app = make_app(app.database_url, clock=clock)

    @app.task(name="t")
    def t() -> None: ...

    t.enqueue_many([((), {})] * 2)
    a, b = app.store.claim("w", 2, None, 10)
    clock.advance(8)
    app.cancel(str(b.id))
    alive, cancel = app.store.heartbeat([(a.id, a.token), (b.id, b.token), (b.id, b.token + 7)], 10)
    assert alive == {a.id, b.id} and cancel == {b.id}
    assert app.get_run(a.id).lease_until == clock.now() + timedelta(seconds=10)
    clock.advance(9)
    assert app.store.rescue() == []  # renewed, so not expired
    app.close()


def test_hand_back_makes_runs_pending_without_counting_the_attempt(app: rota.App) -> None:
    @app.task(name="t", retries=0)
    def t() -> None: ...

    t.enqueue()
    (c,) = app.store.claim("w", 1, None, 30)
    assert app.store.hand_back([(c.id, c.token)], "shutting down") == {c.id}
    run = app.get_run(c.id)
    assert (run.status, run.attempt) == ("pending", 0)
    assert run.history[-1]["status"] == "handed back"
    (again,) = app.store.claim("w2", 1, None, 30)
    assert again.attempt == 1 and again.token > c.token


def test_cancel_pending_and_running(app: rota.App) -> None:
    @app.task(name="t")
    def t() -> None: ...

    pending = t.enqueue()
    assert app.cancel(pending.id).status == "cancelled"
    running = t.enqueue()
    app.store.claim("w", 1, None, 30)
    run = app.cancel(running.id)
    assert run.status == "running" and run.cancel_requested
    assert app.cancel(pending.id).status == "cancelled"  # final: unchanged
    with pytest.raises(rota.RunNotFound, match="no run with id '999999'"):
        app.cancel("999999")


def test_enqueue_many_returns_ids_in_order(app: rota.App) -> None:
    @app.task(name="t")
    def t(i: int) -> None: ...

    ids = t.enqueue_many([((i,), {}) for i in range(250)])
    assert len(set(ids)) == 250
    assert [app.get_run(i).args[0] for i in ids[:3] + ids[-3:]] == [0, 1, 2, 247, 248, 249]
    with pytest.raises(rota.ConfigurationError, match="item 1 is 5"):
        t.enqueue_many([((1,), {}), 5])  # type: ignore[list-item]


def test_list_runs_filters_and_pages(app: rota.App) -> None:
    @app.task(name="a")
    def a() -> None: ...

    @app.task(name="b")
    def b() -> None: ...

    ids = [a.enqueue().id for _ in range(3)] + [b.enqueue().id]
    assert [r.id for r in app.list_runs(task="a")] == ids[2::-1]
    assert [r.id for r in app.list_runs(limit=2)] == [ids[3], ids[2]]
    assert [r.id for r in app.list_runs(before=ids[2], limit=5)] == [ids[1], ids[0]]
    with pytest.raises(rota.ConfigurationError, match="unknown status 'pendng' \\(did you mean 'pending'\\?\\)"):
        app.list_runs(status="pendng")
    assert app.stats()["runs"]["pending"] == 4


def test_schema_newer_than_the_code_is_refused(app_factory: Callable[..., rota.App]) -> None:

    app = app_factory()
    known = load_migrations("sqlite")
    names = [f"{m.version:04d}_{m.name}" for m in known]
    assert app.migrate(dry_run=True) == names
    assert app.migrate() == names
    assert app.migrate() == []  # idempotent
    with app.store._tx() as s:  # type: ignore[attr-defined]
        s.q_text(
            "INSERT INTO rota_migrations (version, name, applied_at) VALUES (99, 'from_the_future', CURRENT_TIMESTAMP)"
        )
    newer = app_factory()
    with pytest.raises(
        rota.SchemaVersionError,
        match=f"schema version 99, newer than the {latest_version(known)} this version of rota knows",
    ):
        newer.list_runs()


def test_duplicate_task_name_is_refused(app: rota.App) -> None:
    app.task(name="same")(lambda: None)
    with pytest.raises(rota.ConfigurationError, match="duplicate task name 'same'"):
        app.task(name="same")(lambda: None)
    with pytest.raises(
        rota.ConfigurationError,
        match="unknown task option 'retires' \\(did you mean 'retries'\\?\\)",
    ):
        app.task(retires=3)  # type: ignore[call-overload]


def test_wait_returns_the_final_run_or_times_out(app: rota.App) -> None:
    @app.task(name="t")
    def t() -> None: ...

    handle = t.enqueue()
    with pytest.raises(rota.WaitTimeout, match=f"run {handle.id} is still pending after 0.1 s"):
        handle.wait(timeout=0.1)


def test_invalid_database_urls_fail_clearly(tmp_path: object) -> None:
    with pytest.raises(rota.ConfigurationError, match=r"unsupported database URL scheme 'oracle' .* MySQL/MariaDB"):
        rota.App("oracle://scott@localhost/db")
    with pytest.raises(rota.ConfigurationError, match="invalid database URL 'rota.db'"):
        rota.App("rota.db")
    with pytest.raises(rota.ConfigurationError, match="needs a database file"):
        rota.App("sqlite:///:memory:")
    with pytest.raises(rota.DatabaseUnavailable, match="does not exist"):
        rota.App("sqlite:////nonexistent/dir/rota.db")


@pytest.mark.parametrize("missing", ["database", "role"])
def test_a_worker_refuses_to_start_where_the_server_refuses_it_for_good(pg_url: str, missing: str) -> None:
    """No such database or role: the server answered, and waiting will not change it. The
    worker's start fails with the reason (a refused or unreachable server is waited for)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(pg_url)
    if missing == "database":
        url = urlunsplit(parts._replace(path="/rota_no_such_database", query=""))
    else:
        url = urlunsplit(parts._replace(netloc=parts.netloc.replace("postgres@", "rota_no_such_role@")))
    app = rota.App(url)
    app.task(name="t")(lambda: None)
    worker = app.worker(install_signal_handlers=False)
    with pytest.raises(rota.DatabaseRefused, match=f'FATAL: +{missing} "rota_no_such_[a-z]+" does not exist'):
        asyncio.run(asyncio.wait_for(worker.run(), 20))
    app.close()


def test_unreachable_postgres_fails_clearly() -> None:
    app = rota.App("postgresql://postgres@127.0.0.1:1/nowhere")
    app._store.connect_timeout = 1  # type: ignore[attr-defined]
    with pytest.raises(
        rota.DatabaseUnavailable,
        match=r"cannot connect to PostgreSQL at postgresql://postgres@127.0.0.1:1/nowhere: .*refused",
    ):
        app.list_runs()


@pytest.mark.parametrize("at_once", [False, True], ids=["timeout", "second-signal"])
def test_a_fenced_run_says_whether_it_outlived_the_timeout_or_a_second_signal_stopped_it(
    app: rota.App, clock: rota.FakeClock, at_once: bool
) -> None:
    """After a second stop signal the drain is skipped: the history said the handler
    "outlived the shutdown timeout", which it never met; it says it was stopped at once."""
    app = make_app(app.database_url, clock=clock)

    @app.task(name="t", retries=1)
    def t() -> None: ...

    t.enqueue()
    (a,) = app.store.claim("host-x:1", 1, None, 30)
    assert app.store.fence([(a.id, a.token)], 2.0, "host-x:1", at_once) == {a.id}
    clock.advance(3)
    assert len(app.store.rescue()) == 1
    message = app.get_run(a.id).attempts[-1]["error"]["message"]
    said, wrong = "it was stopped at once by a second signal", "it outlived the shutdown timeout"
    assert (said if at_once else wrong) in message and (wrong if at_once else said) not in message, message
    app.close()


def test_a_fenced_run_is_rescued_only_when_its_short_lease_ends_and_its_history_says_why(
    app: rota.App, clock: rota.FakeClock
) -> None:
    """Issue 41 item 1: a stopping worker's last write for a run whose handler still runs.
    A run whose earlier error merely looks like that note (another token) reads as lost."""
    app = make_app(app.database_url, clock=clock)

    @app.task(name="t", retries=1)
    def t() -> None: ...

    t.enqueue_many([((), {})] * 2)
    a, b = app.store.claim("host-x:1", 2, None, 30)
    assert app.store.fence([(a.id, a.token), (b.id, b.token + 7)], 2.0, "host-x:1") == {a.id}
    assert app.get_run(a.id).lease_until == clock.now() + timedelta(seconds=2)
    clock.advance(1.5)
    assert app.store.rescue() == []  # the process ends before the fence does
    clock.advance(1)
    (r,) = app.store.rescue()
    run = app.get_run(a.id)
    assert (r.id, run.status, run.attempt) == (a.id, "pending", 1)
    entry = run.attempts[-1]
    assert entry["status"] == "lost" and entry["error"]["type"] == "WorkerStopped", entry
    assert entry["error"]["message"].startswith("worker host-x:1 stopped while the handler still ran"), entry
    assert "(attempt 1 of 2)" in entry["error"]["message"]
    (c,) = app.store.claim("host-y:2", 1, None, 5)  # the retry, whose worker is then lost (kill -9)
    assert c.id == a.id and run.error is not None and run.error["type"] == "WorkerStopped"
    clock.advance(6)
    app.store.rescue()
    run = app.get_run(c.id)
    assert [e["error"]["type"] for e in run.attempts] == ["WorkerStopped", "WorkerLost"], run.attempts
    app.close()
