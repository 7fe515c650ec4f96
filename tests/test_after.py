"""Runs after others (issue 20): `.options(after=[...])` on SQLite and PostgreSQL.

A dependent waits pending and held (not claimable, not due) until every parent succeeded; the
last parent's finish makes it due in the same transaction. A parent ending failed, cancelled
or skipped cancels it, with an error naming that parent, and the cancellation cascades."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner

import rota
from rota.cli import main
from rota.stores.base import Outcome

from .conftest import WITH_MYSQL, make_app, start_worker, store_url
from .test_txn import caller_connection


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def flow_app(url: str, **options: Any) -> tuple[rota.App, rota.Task[..., Any]]:
    app = make_app(url, **options)

    @app.task(name="step")
    def step(n: int) -> int:
        return n

    app.migrate()
    return app, step


def claim_one(app: rota.App, run_id: str) -> Any:
    claims = {str(c.id): c for c in app.store.claim("w", 1, None, 30)}  # the oldest due run
    return claims[run_id]


def end(app: rota.App, run_id: str, status: str, result: str | None = None) -> None:
    c = claim_one(app, run_id)
    assert app.store.finish([Outcome(c.id, c.token, status, result=result, history="{}")]) == {c.id}


def test_a_dependent_waits_until_every_parent_succeeded(db_url: str) -> None:
    app, step = flow_app(db_url)
    a, b = step.enqueue(1), step.enqueue(2)
    child = step.options(after=[a, b.id]).enqueue(3)
    run = child.refresh()
    assert (run.status, run.queued, run.waiting_on) == ("pending", True, 2)
    assert app.run_links(child.id) == {"parents": [a.id, b.id], "dependents": [], "waiting_on": 2}
    assert app.run_links(a.id)["dependents"] == [child.id]
    end(app, a.id, "succeeded", "1")
    assert (child.refresh().queued, child.refresh().waiting_on) == (True, 1)
    assert [c.id for c in app.store.claim("w", 100, None, 30)] == [int(b.id)]  # not the child
    c = claim_one_running(app, b.id)
    written, claimed = app.store.finish_and_claim([Outcome(c.id, c.token, "succeeded", result="2")], "w", 10, None, 30)
    # the last parent's finish made it due: the same transaction's claim takes it
    assert written == {c.id} and [x.id for x in claimed] == [int(child.id)]
    run = child.refresh()
    parent = b.refresh()
    assert run.status == "running" and run.waiting_on == 0 and not run.queued
    assert parent.finished_at is not None and run.scheduled_for >= parent.finished_at  # lateness counts from there
    app.close()


def claim_one_running(app: rota.App, run_id: str) -> Any:
    """A running run's claim as a worker holds it (id, token)."""
    run = app.get_run(run_id)
    assert run.status == "running" and run.token is not None
    return Outcome(int(run.id), run.token, "succeeded")


def test_a_waiting_dependent_is_not_due_for_the_poll(db_url: str) -> None:
    app, step = flow_app(db_url)
    a = step.options(delay=3600).enqueue(1)
    step.options(after=[a]).enqueue(2)
    assert app.store.poll_state(None).next_run_due == a.refresh().due_at
    app.close()


@pytest.mark.parametrize("how", ["failed", "cancelled", "cancel pending", "rescued", "skipped"])
def test_a_parent_that_fails_cancels_its_dependents_and_theirs(db_url: str, how: str, clock: rota.FakeClock) -> None:
    app, step = flow_app(db_url, clock=clock)
    a, other = step.enqueue(1), step.enqueue(2)
    child = step.options(after=[a, other]).enqueue(3)
    grandchild = step.options(after=[child]).enqueue(4)
    if how == "cancel pending":
        app.cancel(a.id)
    elif how == "skipped":  # (rota skips schedule ticks; any statement ending a parent counts)
        if db_url.startswith("mysql"):
            pytest.skip(
                "MySQL: a hand-written UPDATE ends no dependents (no trigger may update rota_runs; see deploy.md)"
            )
        with app.store._tx() as s:  # type: ignore[attr-defined]
            s.q_text(f"UPDATE rota_runs SET status = 'skipped' WHERE id = {int(a.id)}")
    elif how == "rescued":  # lease lost on the last attempt: failed by the rescue
        claim_one(app, a.id)
        clock.advance(31)
        assert [r.id for r in app.store.rescue()] == [int(a.id)]
    else:
        end(app, a.id, how)
    ended = a.refresh().status
    for run, parent in ((child.refresh(), a.id), (grandchild.refresh(), child.id)):
        assert (run.status, run.queued) == ("cancelled", False)
        assert run.error is not None and run.error["type"] == "DependencyFailed"
        assert f"parent run {parent} (step) ended" in run.error["message"]
        assert run.finished_at is not None  # (the parent's end, else the database's now)
    assert child.refresh().error["message"].endswith(f"ended {ended}")  # type: ignore[index]
    assert other.refresh().status == "pending"  # the other parent is untouched
    app.close()


def test_a_failed_attempt_with_retries_left_keeps_the_dependent_waiting(db_url: str) -> None:
    app, step = flow_app(db_url)
    a = step.options(retries=1).enqueue(1)
    child = step.options(after=[a]).enqueue(2)
    c = claim_one(app, a.id)
    app.store.finish([Outcome(c.id, c.token, "pending", error="{}", retry_in=0, history="{}")])
    assert (child.refresh().status, child.refresh().waiting_on) == ("pending", 1)
    end(app, a.id, "succeeded", "7")
    assert (child.refresh().queued, child.refresh().waiting_on) == (False, 0)
    app.close()


def test_parents_that_already_ended_when_the_child_is_enqueued(db_url: str) -> None:
    app, step = flow_app(db_url)
    done, bad = step.enqueue(1), step.enqueue(2)
    end(app, done.id, "succeeded", "1")
    end(app, bad.id, "failed")
    ready = step.options(after=[done]).enqueue(3)
    assert (ready.refresh().queued, ready.refresh().waiting_on) == (False, 0)
    assert [c.id for c in app.store.claim("w", 10, None, 30)] == [int(ready.id)]
    refused = step.options(after=[done, bad]).enqueue(4).refresh()
    assert refused.status == "cancelled" and refused.finished_at is not None
    assert refused.error is not None and f"parent run {bad.id} (step) ended failed" in refused.error["message"]
    app.close()


def test_unknown_ids_and_bad_values_are_refused_with_one_line(db_url: str) -> None:
    app, step = flow_app(db_url)
    a = step.enqueue(1)
    with pytest.raises(rota.ConfigurationError, match="after= names 2 run id\\(s\\) that do not exist: 98, 99") as info:
        step.options(after=[a, "98", 99]).enqueue(2)
    assert "\n" not in str(info.value)
    assert [r.id for r in app.list_runs()] == [a.id]  # nothing written
    for bad in (["x"], [1.5], "abc", [None], {"a": 1}, True):
        with pytest.raises(rota.ConfigurationError, match="after= takes"):
            step.options(after=bad)  # type: ignore[arg-type]
    app.close()


def test_an_id_not_given_out_yet_is_refused_so_no_cycle_can_form(db_url: str) -> None:
    """No cycle can form: a parent must exist when its child is enqueued (its row is looked
    up and locked before the child is inserted) and a run's parents never change afterwards,
    so every edge runs from an older run to a newer one. Closing a loop would need a run to
    name one not created yet, even the id it would get itself: that is refused, storing nothing."""
    app, step = flow_app(db_url)
    a = step.enqueue(1)
    nxt = int(a.id) + 1  # the id the next run gets
    missing = f"after= names 1 run id\\(s\\) that do not exist: {nxt}; pass handles or ids of enqueued runs"
    for parents in ([nxt], [a, nxt]):  # the child's own id; a real parent beside it
        with pytest.raises(rota.ConfigurationError, match=missing):
            step.options(after=parents).enqueue(2)
    # a batch whose runs would be nxt and nxt + 1: each naming the second is refused at the first
    with pytest.raises(rota.ConfigurationError, match=f"that do not exist: {nxt + 1};"):
        step.options(after=[nxt + 1]).enqueue_many([((2,), {}), ((3,), {})])
    assert [r.id for r in app.list_runs()] == [a.id]  # nothing stored, no edge
    assert app.run_links(a.id) == {"parents": [], "dependents": [], "waiting_on": 0}
    b = step.options(after=[a]).enqueue(4)
    assert int(b.id) == nxt  # the refused id was the next one indeed
    assert app.run_links(b.id)["parents"] == [a.id]
    app.close()


def test_a_whole_flow_in_a_caller_s_transaction_commits_or_not_at_all(
    app_factory: Callable[..., rota.App], db_url: str
) -> None:
    app = app_factory()

    @app.task(name="step")
    def step(n: int) -> int:
        return n

    app.migrate()
    with caller_connection(db_url) as conn:
        a = step.options(connection=conn).enqueue(1)
        b = step.options(connection=conn, after=[a]).enqueue(2)
        assert b.created
        conn.rollback()
        assert app.list_runs() == []
        a = step.options(connection=conn).enqueue(1)
        many = step.options(connection=conn, after=[a]).enqueue_many([((2,), {}), ((3,), {})])
        conn.commit()
    assert [app.run_links(i)["parents"] for i in many] == [[a.id], [a.id]]
    end(app, a.id, "succeeded", "1")
    assert {str(c.id) for c in app.store.claim("w", 10, None, 30)} == set(many)


def test_ctx_parents_maps_parent_ids_to_results_and_a_fan_in_runs_once(app_factory: Callable[..., rota.App]) -> None:
    app = app_factory()
    seen: list[dict[str, Any]] = []

    @app.task(name="part")
    def part(n: int) -> dict[str, int]:
        return {"n": n}

    @app.task(name="report", pass_context=True)
    def report(ctx: rota.RunContext, month: str) -> int:
        seen.append(dict(ctx.parents))
        return len(ctx.parents)

    app.migrate()
    parts = [part.enqueue(i) for i in range(20)]
    done = report.options(after=parts).enqueue("2026-11")
    start_worker(app, concurrency=4)
    assert done.wait(30).status == "succeeded"
    assert seen == [{p.id: {"n": i} for i, p in enumerate(parts)}]
    assert done.refresh().result == 20


def test_a_retry_of_a_failed_parent_does_not_revive_cancelled_dependents(db_url: str) -> None:
    app, step = flow_app(db_url)
    a = step.enqueue(1)
    child = step.options(after=[a]).enqueue(2)
    end(app, a.id, "failed")
    again = app.retry(a.id)
    end(app, again.id, "succeeded", "1")
    assert child.refresh().status == "cancelled"
    assert app.run_links(again.id)["dependents"] == []
    app.close()


def test_the_cli_and_the_api_show_parents_and_dependents(db_url: str) -> None:
    app, step = flow_app(db_url)
    a = step.enqueue(1)
    child = step.options(after=[a]).enqueue(2)
    runner = CliRunner(env={"COLUMNS": "300"})
    out = runner.invoke(main, ["--database-url", db_url, "run", child.id, "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert (data["parents"], data["dependents"], data["waiting_on"]) == ([a.id], [], 1)
    text = runner.invoke(main, ["--database-url", db_url, "run", a.id]).output
    assert f'dependents: ["{child.id}"]' in text
    listing = runner.invoke(main, ["--database-url", db_url, "runs"]).output
    assert "waiting for 1 parent run(s) to succeed" in listing
    from starlette.testclient import TestClient

    from rota.web import create_app

    with TestClient(create_app(app), base_url="http://localhost") as client:
        detail = client.get(f"/api/runs/{child.id}").json()
    assert (detail["parents"], detail["dependents"], detail["waiting_on"]) == ([a.id], [], 1)
    app.close()


def test_pruning_a_dependent_drops_its_edges(db_url: str, clock: rota.FakeClock) -> None:
    app, step = flow_app(db_url, clock=clock)
    a = step.enqueue(1)
    child = step.options(after=[a]).enqueue(2)
    end(app, a.id, "failed")
    clock.advance(10)
    assert app.store.prune("cancelled", 5, 100) == 1
    assert app.run_links(a.id)["dependents"] == []
    with app.store._read() as s:  # type: ignore[attr-defined]
        assert s.q_text("SELECT count(*) FROM rota_deps")[0][0] == 0
    assert child.id not in {r.id for r in app.list_runs()}
    app.close()


def test_fake_context_gives_a_handler_its_parents(app: rota.App) -> None:
    import rota.testing

    @app.task(name="report", pass_context=True)
    def report(ctx: rota.RunContext) -> int:
        return sum(ctx.parents.values())

    ctx = rota.testing.fake_context(report, parents={"1": 2, "3": 4})
    assert rota.testing.call(report, context=ctx) == 6
    assert rota.testing.fake_context(report).parents == {}


def test_a_chain_is_at_most_251_runs_deep_and_a_failure_cancels_all_of_it(db_url: str) -> None:
    from rota.stores.sqlstore.enqueue import MAX_CHAIN

    app, step = flow_app(db_url)
    root = prev = step.enqueue(0)
    chain = []
    for i in range(MAX_CHAIN):
        prev = step.options(after=[prev]).enqueue(i)
        chain.append(prev)
    with pytest.raises(rota.ConfigurationError, match="chain of 252 runs each waiting for the previous; at most 251"):
        step.options(after=[prev]).enqueue(-1)
    end(app, root.id, "failed")  # one transaction cancels the 250 behind it
    assert {r.status for r in app.list_runs(limit=500) if r.id != root.id} == {"cancelled"}
    assert chain[-1].refresh().error["message"] == f"parent run {chain[-2].id} (step) ended cancelled"  # type: ignore[index]
    app.close()


def test_only_waiting_links_count_toward_the_chain(db_url: str) -> None:
    """A pipeline that enqueues each step after the previous one succeeded never grows."""
    app, step = flow_app(db_url)

    def depth(run: rota.RunHandle) -> int:
        with app.store._read() as s:  # type: ignore[attr-defined]
            return int(s.q_text(f"SELECT after_depth FROM rota_runs WHERE id = {int(run.id)}")[0][0])

    prev = step.enqueue(0)
    for i in range(3):
        nxt = step.options(after=[prev]).enqueue(i)
        assert nxt.refresh().waiting_on == 1 and depth(nxt) == 1
        end(app, prev.id, "succeeded", "1")
        assert depth(nxt) == 0  # released: no longer part of a waiting chain
        prev = nxt
    app.close()


def test_a_dependent_enqueued_while_its_parent_finishes_is_never_left_waiting(db_url: str) -> None:
    """The race the parents' row lock closes: the finish either sees the new edge (and
    releases the child) or commits first (and the enqueue sees a succeeded parent)."""
    import threading

    app, step = flow_app(db_url)
    children = []
    for _ in range(30):
        parent = step.enqueue(0)
        c = claim_one(app, parent.id)
        barrier = threading.Barrier(2)

        def finish(c: Any = c, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            app.store.finish([Outcome(c.id, c.token, "succeeded", result="1")])

        thread = threading.Thread(target=finish)
        thread.start()
        barrier.wait()
        children.append(step.options(after=[parent]).enqueue(1))
        thread.join(10)
        end(app, children[-1].id, "succeeded", "1")  # released either way: it can be claimed
    assert all(child.refresh().status == "succeeded" for child in children)
    app.close()


def test_a_flow_on_a_psycopg_async_connection(pg_url: str) -> None:
    import asyncio

    import psycopg

    app, step = flow_app(pg_url)

    async def scenario() -> tuple[rota.RunHandle, rota.RunHandle, rota.RunHandle]:
        conn = await psycopg.AsyncConnection.connect(pg_url)
        async with conn:
            async with conn.transaction():
                a = await step.options(connection=conn, key="k", unique_for=600).enqueue_async(1)
                twin = await step.options(connection=conn, key="k", unique_for=600).enqueue_async(1)
                child = await step.options(connection=conn, after=[a]).enqueue_async(2)
            return a, twin, child

    a, twin, child = asyncio.run(scenario())
    assert a.created and (twin.id, twin.created) == (a.id, False)
    assert app.run_links(child.id) == {"parents": [a.id], "dependents": [], "waiting_on": 1}
    end(app, a.id, "succeeded", "1")
    assert child.refresh().waiting_on == 0
    app.close()


def test_a_fan_in_of_1000_parents_is_released_by_the_last_finish(db_url: str) -> None:
    app, step = flow_app(db_url)
    store = app.store
    parents = [i for i, _ in store.insert_runs([step.options()._new_run((i,), {}) for i in range(1000)])]
    child = step.options(after=parents).enqueue(-1)
    assert child.refresh().waiting_on == 1000
    claimed = store.claim("w", 1000, None, 30)
    assert len(claimed) == 1000  # the child is not among them
    for start in range(0, 1000, 100):
        batch = claimed[start : start + 100]
        store.finish([Outcome(c.id, c.token, "succeeded", result="1") for c in batch])
        assert child.refresh().waiting_on == 900 - start
    run = child.refresh()
    assert (run.status, run.queued) == ("pending", False)
    assert [c.id for c in store.claim("w", 10, None, 30)] == [int(child.id)]
    app.close()


def test_a_keyed_dependent_s_twin_is_returned_without_new_edges(db_url: str) -> None:
    app, step = flow_app(db_url)
    a = step.enqueue(1)
    first = step.options(key="report", after=[a]).enqueue(2)
    twin = step.options(key="report", after=[a]).enqueue(2)
    assert first.created and (twin.id, twin.created) == (first.id, False)
    assert app.run_links(a.id)["dependents"] == [first.id]
    app.close()


def test_a_released_dependent_starts_within_a_wake_up_not_a_poll(app_factory: Callable[..., rota.App]) -> None:
    """The last parent's finish releases the dependent in its transaction; the worker that
    wrote it is woken (SQLite: by its own store; PostgreSQL: the trigger's NOTIFY), so with a
    10 s poll interval the dependent still starts at once."""
    app = app_factory(poll_interval=10.0)

    @app.task(name="parent")
    def parent(i: int) -> int:
        return i

    @app.task(name="child")
    def child() -> None: ...

    ids = parent.enqueue_many([((i,), {}) for i in range(50)])
    dependent = child.options(after=ids).enqueue()
    start_worker(app, concurrency=100)  # every parent in one claim: the last finish has no claim with it
    run = dependent.wait(timeout=8)  # well under the poll interval
    finished = [app.get_run(i).finished_at for i in ids]
    assert run.status == "succeeded" and run.started_at is not None
    assert all(f is not None and f <= run.started_at for f in finished)
    assert (run.started_at - max(f for f in finished if f)).total_seconds() < 1.0
