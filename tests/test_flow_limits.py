"""Concurrency limits (rota.Limit), enforced by the database: contract tests on both stores
(the claim, the slot freed by every way a run stops running, no head-of-line blocking) and
the decoration-time checks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import rota
from rota.stores.base import Outcome

from .conftest import WITH_MYSQL, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


OWNER = "w"


def _limited_app(app_factory: Callable[..., rota.App]) -> tuple[rota.App, dict[str, Any]]:
    app = app_factory()

    @app.task(limit=2, name="two")
    def two(n: int) -> int:
        return n

    @app.task(limit=rota.Limit(1, by="customer_id"), name="per_customer")
    def per_customer(customer_id: int, n: int = 0) -> int:
        return n

    @app.task(limit=rota.Limit(3, name="stripe"), name="charge")
    def charge(n: int) -> int:
        return n

    @app.task(limit=rota.Limit(3, name="stripe"), name="refund")
    def refund(n: int) -> int:
        return n

    @app.task(name="plain")
    def plain(n: int) -> int:
        return n

    app.migrate()
    app.prepare()  # what a worker does at start: stores the limits
    return app, {"two": two, "per_customer": per_customer, "charge": charge, "refund": refund, "plain": plain}


def _claim(app: rota.App, n: int = 100) -> list[Any]:
    return app.store.claim(OWNER, n, None, 30.0)


def _tasks(claimed: list[Any]) -> list[str]:
    return sorted(c.task for c in claimed)


def test_a_task_limit_caps_its_running_runs_and_the_rest_wait_pending(app_factory: Callable[..., rota.App]) -> None:
    app, t = _limited_app(app_factory)
    for i in range(5):
        t["two"].enqueue(i)
    first = _claim(app)
    assert _tasks(first) == ["two", "two"]
    assert _claim(app) == []  # full: the others stay pending, no attempt spent
    pending = app.list_runs(status="pending")
    assert len(pending) == 3 and all(r.attempt == 0 for r in pending)
    app.store.finish([Outcome(first[0].id, first[0].token, "succeeded", result="0")])
    again = _claim(app)
    assert _tasks(again) == ["two"]  # one slot freed, one more started


def test_a_limit_by_argument_holds_one_per_value_and_never_blocks_other_keys(
    app_factory: Callable[..., rota.App],
) -> None:
    app, t = _limited_app(app_factory)
    for _ in range(3):
        t["per_customer"].enqueue(7)  # three for customer 7, enqueued first
    t["per_customer"].enqueue(8)
    t["per_customer"].enqueue(customer_id=9, n=1)
    t["plain"].enqueue(1)
    claimed = _claim(app)
    keys = sorted(app.get_run(str(c.id)).args[0] if app.get_run(str(c.id)).args else 9 for c in claimed)  # type: ignore[union-attr]
    assert len(claimed) == 4 and _tasks(claimed).count("per_customer") == 3
    assert keys.count(7) == 1
    assert _claim(app) == []  # customer 7's other two wait


def test_a_named_limit_is_one_pool_shared_by_every_task_naming_it(app_factory: Callable[..., rota.App]) -> None:
    app, t = _limited_app(app_factory)
    for i in range(3):
        t["charge"].enqueue(i)
        t["refund"].enqueue(i)
    assert len(_claim(app)) == 3
    assert _claim(app) == []
    (info,) = [i for i in app.store.list_limits() if i.name == "stripe"]  # type: ignore[attr-defined]
    assert (info.max, info.running, info.waiting) == (3, 3, 3)


@pytest.mark.parametrize("end", ["failed", "retry", "cancelled", "hand_back", "rescue"])
def test_every_way_a_run_stops_running_frees_its_slot_once(app_factory: Callable[..., rota.App], end: str) -> None:
    app, t = _limited_app(app_factory)
    for i in range(3):
        t["per_customer"].enqueue(1, i)
    store: Any = app.store
    lease = 0.01 if end == "rescue" else 30.0
    (c,) = store.claim(OWNER, 10, None, lease)
    if end == "failed":
        store.finish([Outcome(c.id, c.token, "failed", error='{"type":"E","message":"m"}', history="{}")])
    elif end == "retry":
        store.finish(
            [Outcome(c.id, c.token, "pending", error='{"type":"E","message":"m"}', retry_in=0.0, history="{}")]
        )
    elif end == "cancelled":
        store.finish([Outcome(c.id, c.token, "cancelled", history="{}")])
    elif end == "hand_back":
        store.hand_back([(c.id, c.token)], "test")
    else:
        import time

        time.sleep(0.05)
        assert [r.id for r in store.rescue()] == [c.id]
    (d,) = store.claim(OWNER, 10, None, 30.0)  # the slot is free again: exactly one more
    # a late, fenced-off result of the first attempt changes nothing and frees nothing
    assert store.finish([Outcome(c.id, c.token, "succeeded", result="1")]) == set()
    assert store.claim(OWNER, 10, None, 30.0) == []
    assert d.id != c.id or end in ("retry", "hand_back", "rescue")


def test_a_limit_declared_anew_by_a_deploy_wins(app_factory: Callable[..., rota.App]) -> None:
    app, t = _limited_app(app_factory)
    for i in range(6):
        t["two"].enqueue(i)
    assert len(_claim(app)) == 2
    newer = app_factory()

    @newer.task(limit=4, name="two")
    def two(n: int) -> int:
        return n

    newer.prepare()
    assert len(_claim(app)) == 2  # the stored limit is now 4
    assert [(i.name, i.max) for i in app.store.list_limits() if i.name == "two"] == [("two", 4)]  # type: ignore[attr-defined]


def test_runs_of_a_limit_no_worker_declared_yet_wait(app_factory: Callable[..., rota.App]) -> None:
    client = app_factory()

    @client.task(limit=1, name="undeclared")
    def undeclared() -> None: ...

    client.migrate()
    undeclared.enqueue()
    assert client.store.claim(OWNER, 5, None, 30.0) == []  # no limit row: flow claim not even on
    client.prepare()
    assert len(client.store.claim(OWNER, 5, None, 30.0)) == 1


def test_a_by_parameter_the_handler_lacks_fails_at_decoration_with_a_hint(tmp_path: Any) -> None:
    app = rota.App(f"sqlite:///{tmp_path}/r.db")
    with pytest.raises(rota.ConfigurationError, match=r"by='custmer_id'.*did you mean 'customer_id'"):

        @app.task(limit=rota.Limit(1, by="custmer_id"))
        def sync(customer_id: int) -> None: ...


def test_a_callable_or_a_tuple_by_keys_the_run(app_factory: Callable[..., rota.App]) -> None:
    app = app_factory()

    @app.task(limit=rota.Limit(1, by=("region", "account")), name="pair")
    def pair(region: str, account: int, extra: int = 0) -> None: ...

    @app.task(limit=rota.Limit(1, by=lambda order, **_: order["shop"]), name="call")
    def call(order: dict[str, str], note: str = "") -> None: ...

    app.migrate()
    app.prepare()
    pair.enqueue("eu", 1)
    pair.enqueue("eu", account=1, extra=2)  # the same key
    pair.enqueue("us", 1)
    call.enqueue({"shop": "a"})
    call.enqueue({"shop": "a"}, note="x")
    call.enqueue({"shop": "b"})
    assert _tasks(app.store.claim(OWNER, 10, None, 30.0)) == ["call", "call", "pair", "pair"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "limit must be an integer from 1 to"),
        ("3", "limit must be a positive integer"),
        (rota.Limit, "limit must be"),
    ],
)
def test_a_bad_limit_is_refused_in_one_line(value: object, message: str, tmp_path: Any) -> None:
    app = rota.App(f"sqlite:///{tmp_path}/r.db")
    with pytest.raises(rota.ConfigurationError, match=message):
        app.task(limit=value)(lambda: None)  # type: ignore[call-overload]


def test_two_tasks_naming_one_pool_with_different_sizes_fail(tmp_path: Any) -> None:
    app = rota.App(f"sqlite:///{tmp_path}/r.db")
    app.task(limit=rota.Limit(3, name="stripe"), name="a")(lambda: None)
    with pytest.raises(rota.ConfigurationError, match="limit 'stripe' is declared twice"):
        app.task(limit=rota.Limit(4, name="stripe"), name="b")(lambda: None)


def test_a_retried_run_of_a_limited_task_keeps_its_limit(app_factory: Callable[..., rota.App]) -> None:
    app, t = _limited_app(app_factory)
    first = t["per_customer"].enqueue(5)
    (c,) = _claim(app)
    app.store.finish([Outcome(c.id, c.token, "failed", error='{"type":"E","message":"m"}', history="{}")])
    t["per_customer"].enqueue(5)
    again = app.retry(first.id)
    assert len(_claim(app)) == 1  # the retry and the new run share customer 5's one slot
    assert app.get_run(again.id).status in ("pending", "running")  # type: ignore[union-attr]
    assert [r.status for r in app.list_runs(task="per_customer", status="pending")] == ["pending"]


def test_a_schedule_of_a_limited_task_makes_runs_under_its_limit(app_factory: Callable[..., rota.App]) -> None:
    app, t = _limited_app(app_factory)
    t["two"].enqueue(1)
    t["two"].enqueue(2)
    app.add_schedule("often", "two", every=60, args=[3], overlap="concurrent")
    app.trigger("often")  # a manual tick: made by the store, from the schedule's arguments
    assert len(_claim(app)) == 2
    (tick,) = [r for r in app.list_runs(task="two", status="pending")]
    assert tick.schedule == "often"
    assert [(i.name, i.running, i.waiting) for i in app.store.list_limits() if i.name == "two"] == [("two", 2, 1)]  # type: ignore[attr-defined]


def test_concurrent_claimers_never_exceed_a_limit_per_key(app_factory: Callable[..., rota.App]) -> None:
    """Eight threads claim and finish at once (each its own connection on PostgreSQL); the
    database's start and finish times show at most one running per customer at any moment."""
    import threading

    from tests.faults.invariants import attempt_intervals, max_overlap

    app, t = _limited_app(app_factory)
    t["per_customer"].enqueue_many([((i % 5, i), {}) for i in range(80)])
    store: Any = app.store
    errors: list[BaseException] = []

    def claimer(n: int) -> None:
        try:
            for _ in range(40):
                got = store.claim(f"w{n}", 3, None, 30.0)
                store.finish([Outcome(c.id, c.token, "succeeded", result="1") for c in got])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors
    runs = app.list_runs(task="per_customer", limit=1000)
    by_key: dict[int, list[tuple[float, float, str]]] = {}
    for run in runs:
        by_key.setdefault(run.args[0], []).extend(attempt_intervals(run))
    assert {k: max_overlap(v) for k, v in by_key.items() if v} == dict.fromkeys(range(5), 1)
    assert sum(r.status == "succeeded" for r in runs) >= 40


def test_plain_claims_only_probe_while_no_limited_run_is_due_and_none_starves(
    app_factory: Callable[..., rota.App],
) -> None:
    app, t = _limited_app(app_factory)
    store: Any = app.store
    t["plain"].enqueue(0)
    assert _tasks(store.claim(OWNER, 5, None, 30.0)) == ["plain"]
    assert store.flow_due is False  # no limited run due: the next claims are plain + probe
    t["plain"].enqueue_many([((i,), {}) for i in range(20)])
    t["two"].enqueue(1)  # behind a backlog that fills every claim
    first = store.claim(OWNER, 5, None, 30.0)
    second = store.claim(OWNER, 5, None, 30.0)
    assert "two" in _tasks(first + second)


def test_outcomes_written_with_a_claim_free_their_slots_for_it_in_one_transaction(
    app_factory: Callable[..., rota.App],
) -> None:
    """finish_and_claim while limited runs are due: the finishes go first in the claim's
    transaction, so the slots they free are taken by the same claim (and no more)."""
    app, t = _limited_app(app_factory)
    for i in range(5):
        t["two"].enqueue(i)
    t["plain"].enqueue(9)
    store: Any = app.store
    first = _tasks(got := store.claim(OWNER, 10, None, 30.0))
    assert first == ["plain", "two", "two"]
    limited = [c for c in got if c.task == "two"]
    done = [Outcome(limited[0].id, limited[0].token, "succeeded", result="0")]
    written, again = store.finish_and_claim(done, OWNER, 10, None, 30.0)
    assert written == {limited[0].id}
    assert _tasks(again) == ["two"]  # the one slot the finish freed, in the same call
    assert store.finish_and_claim([], OWNER, 10, None, 30.0)[1] == []  # full again
    assert sum(r.status == "running" for r in app.list_runs(task="two")) == 2


def test_a_worker_waiting_on_a_full_limit_learns_no_past_due_time(app_factory: Callable[..., rota.App]) -> None:
    """After a claim that left due limited runs waiting on a full limit, the due time the
    worker learns is not theirs (past): it sleeps until a slot frees or a later run is due,
    rather than claiming in a loop."""
    app, t = _limited_app(app_factory)
    for i in range(4):
        t["two"].enqueue(i)
    store: Any = app.store
    assert len(store.claim(OWNER, 10, None, 30.0)) == 2
    assert store.claim(OWNER, 10, None, 30.0) == []
    state = store.poll_after_claim(None)
    assert state.next_run_due is None  # the two waiting runs are due, but their limit is full
    assert store.poll_state(None).next_run_due is not None  # the plain poll still sees them
    later = t["plain"].options(delay=60).enqueue(1)
    assert later is not None
    assert store.poll_after_claim(None).next_run_due > state.now  # a run due later is learned


def test_a_held_limited_run_counts_against_its_limit(app_factory: Callable[..., rota.App]) -> None:
    """A run of a limit claimed ahead (held: running, not started) takes a slot like a
    running one: no claim takes the limit past its size while it is held."""
    app, t = _limited_app(app_factory)
    for i in range(4):
        t["two"].enqueue(i)
    store: Any = app.store
    got = store.claim(OWNER, 10, None, 30.0, 1)  # one free slot: the rest may be held
    assert _tasks(got) == ["two", "two"] and [c.held for c in got] == [False, True]
    assert store.claim(OWNER, 10, None, 30.0) == []  # the held one counts
    (info,) = [i for i in store.list_limits() if i.name == "two"]
    assert (info.running, info.waiting) == (2, 2)
    held = [c for c in got if c.held]
    assert store.hand_back([(held[0].id, held[0].token)], "test") == {held[0].id}
    assert _tasks(store.claim(OWNER, 10, None, 30.0)) == ["two"]  # handed back: its slot is free


def test_a_claim_holds_no_more_than_flow_held_runs_of_a_limit_beyond_its_free_slots(
    app_factory: Callable[..., rota.App],
) -> None:
    """A worker with few slots and a big prefetch cap does not take a wide limit whole for
    its own pace: held runs of a limit keep slots another worker could start now."""
    from rota.stores.sqlstore.limits import FLOW_HELD

    app = app_factory()

    @app.task(limit=100, name="wide")
    def wide(n: int) -> int:
        return n

    app.migrate()
    app.prepare()
    wide.enqueue_many([((i,), {}) for i in range(150)])
    store: Any = app.store
    got = store.claim(OWNER, 200, None, 30.0, 5)  # 5 free slots, room for 195 more held
    assert len(got) == 5 + FLOW_HELD and len([c for c in got if c.held]) == FLOW_HELD
    assert len(store.claim("other", 10, None, 30.0)) == 10  # the limit still has room for another worker


def test_a_worker_of_some_queues_claims_and_probes_only_their_limited_runs(
    app_factory: Callable[..., rota.App],
) -> None:
    app = app_factory()

    @app.task(limit=5, name="mail", queue="mail")
    def mail(n: int) -> int:
        return n

    @app.task(limit=5, name="report", queue="reports")
    def report(n: int) -> int:
        return n

    app.migrate()
    app.prepare()
    store: Any = app.store
    report.enqueue_many([((i,), {}) for i in range(3)])
    assert store.claim(OWNER, 10, ["mail"], 30.0) == []
    assert store.flow_due is False  # the probe of the mail queue (flow_due_in_queues): none due there
    mail.enqueue_many([((i,), {}) for i in range(7)])
    store.flow_due = True  # as a wake-up would leave it
    got = store.claim(OWNER, 10, ["mail"], 30.0)
    assert _tasks(got) == ["mail"] * 5  # its limit, and nothing of the other queue
    assert store.flow_due is True  # two more mail runs wait for a slot
    assert _tasks(store.claim(OWNER, 10, None, 30.0)) == ["report"] * 3  # every queue: flow_due
    assert store.flow_due is True


def test_enqueue_many_keys_every_run_like_enqueue_also_in_a_callers_transaction(
    app_factory: Callable[..., rota.App], db_url: str
) -> None:
    """enqueue_many takes the bulk path (COPY on PostgreSQL, also in a caller's transaction)
    for runs with a limit or a rate too: each run still carries its key."""
    from .test_txn import caller_connection

    app, t = _limited_app(app_factory)

    @app.task(rate=rota.Rate(2, per=60), name="rated")
    def rated(n: int) -> int:
        return n

    app.prepare()
    with pytest.MonkeyPatch.context() as patch:  # the bulk path, not one statement a run
        patch.setattr(app.store, "_insert_steps", lambda runs: pytest.fail("inserted one by one"))
        t["per_customer"].enqueue_many([((c, n), {}) for c in (1, 2) for n in range(3)])
        rated.enqueue_many([((n,), {}) for n in range(5)])
    with caller_connection(db_url) as conn:
        t["two"].enqueue_many([((n,), {}) for n in range(4)], connection=conn)
        conn.commit()
    got = _tasks(_claim(app))
    assert got.count("per_customer") == 2  # one per customer
    assert got.count("rated") == 2  # the rate's window
    assert got.count("two") == 2  # its limit
    assert len(app.list_runs(limit=100)) == 15


def test_the_limited_claim_updates_its_runs_by_address_after_a_burst_the_statistics_miss(pg_url: str) -> None:
    """flow_take_limits reaches the runs it picked by their addresses, whatever the table's
    statistics say: joined to them by id, the planner believed the few pending runs of the
    last ANALYZE and hashed (or walked) every pending run of the burst on each claim."""
    import json

    import psycopg

    app = rota.App(pg_url)
    task = app.task(name="limited", limit=50)(lambda: None)
    app.migrate()
    app.prepare()
    task.enqueue()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("ANALYZE rota_runs")  # the statistics of a quiet table: one pending run
    task.enqueue_many([((), {}) for _ in range(3000)])  # then a burst
    store: Any = app.store
    with store._tx() as s:
        heads = s.q("flow_heads", queues=None, n=10)
        keys = json.dumps([[str(k), str(n), str(v)] for k, n, v, _ in heads])
        params = {"keys": keys, "owner": OWNER, "limit": 50, "start": 50, "queues": None, "lease": 30.0, "now": None}
        plan = "\n".join(str(r[0]) for r in s.q_text("EXPLAIN " + store.queries["flow_take_limits"], **params))
    app.close()
    scans = [line for line in plan.splitlines() if line.startswith("  ->  ")]  # the update's own, not its CTEs'
    assert len(scans) == 1 and scans[0].startswith("  ->  Tid Scan on rota_runs r "), plan


@pytest.mark.parametrize("queues", [None, ["default"]])
def test_the_flow_due_probe_reads_its_index_not_the_table_when_most_runs_wait(
    pg_url: str, queues: list[str] | None
) -> None:
    """flow_due ends every flow claim's transaction. Written as a plain EXISTS, the planner
    chose a sequential scan once the statistics said most rows wait (the first match "must be
    near"), and read every finished run in front of the waiting ones: 1-2 ms per claim in a
    limited drain, growing with the history kept."""
    import psycopg

    from rota.stores.sqlstore.limits_sql import flow_due_call

    app = rota.App(pg_url)
    task = app.task(name="limited", limit=50)(lambda: None)
    app.migrate()
    app.prepare()
    task.enqueue_many([((), {}) for _ in range(3000)])
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("ANALYZE rota_runs")  # the statistics of a backlog: nearly every row waits
    store: Any = app.store
    query, params = flow_due_call(queues)
    with store._tx() as s:
        plan = "\n".join(str(r[0]) for r in s.q_text("EXPLAIN " + store.queries[query], **params))
        assert s.q(query, **params) == [(True,)]
    app.close()
    assert "Seq Scan on rota_runs" not in plan and "rota_runs_gated_due" in plan, plan
