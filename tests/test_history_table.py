"""Schema 17 (PostgreSQL): a succeeded run of no schedule leaves rota_runs for rota_history in
its finish's own statement; every read that can meet a final run finds it there, exactly as
before; dependents, keys and pruning behave as they did on one table."""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any

import pytest

import rota
from rota.stores.base import NewRun, Outcome
from rota.stores.sqlstore.queries import load_queries

from .conftest import make_app, start_worker, wait_for

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg_app(pg_url: str) -> Any:
    app = make_app(pg_url)
    app.migrate()
    yield app
    for worker in list(app._workers):
        worker.stop(wait=True, timeout=10)
    app.close()


def _where(app: rota.App, run_id: int) -> str:
    with app.store._read() as s:  # type: ignore[attr-defined]
        hot = s.q_text(f"SELECT 1 FROM rota_runs WHERE id = {int(run_id)}")
        kept = s.q_text(f"SELECT 1 FROM rota_history WHERE id = {int(run_id)}")
    assert not (hot and kept), run_id  # never in both
    return "runs" if hot else "history" if kept else "gone"


def _columns(app: rota.App, table: str) -> list[str]:
    with app.store._read() as s:  # type: ignore[attr-defined]
        rows = s.q_text(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
            f" AND table_name = '{table}' ORDER BY ordinal_position"
        )
    return [str(r[0]) for r in rows]


def _finish(app: rota.App, status: str = "succeeded", n: int = 100) -> list[int]:
    claimed = app.store.claim("w", n, None, 30.0)
    done = app.store.finish([Outcome(c.id, c.token, status, result="1", error='{"type": "E"}') for c in claimed])
    assert done == {c.id for c in claimed}
    return sorted(c.id for c in claimed)


def test_the_history_has_the_columns_of_rota_runs_and_the_finish_moves_every_one(pg_app: rota.App) -> None:
    """The invariant a later migration must keep: one column list, in one order, in both tables,
    the view and the finish's INSERT (a column missing there would be lost on the move)."""
    runs = _columns(pg_app, "rota_runs")
    assert _columns(pg_app, "rota_history") == runs == _columns(pg_app, "rota_runs_all")
    finish = load_queries("postgres", "now()")["finish_succeeded"]
    listed = re.search(r"INSERT INTO rota_history \(([^)]*)\)", finish)
    assert listed is not None
    assert [c.strip() for c in listed.group(1).split(",")] == runs


def test_a_succeeded_one_off_run_moves_and_reads_as_before(pg_app: rota.App) -> None:
    @pg_app.task(name="t")
    def t() -> None: ...

    handles = [t.enqueue() for _ in range(5)]
    ids = _finish(pg_app)
    assert ids == sorted(int(h.id) for h in handles)
    assert {_where(pg_app, i) for i in ids} == {"history"}
    run = pg_app.get_run(ids[0])
    assert (run.status, run.attempt, run.result) == ("succeeded", 1, 1)
    assert run.started_at is not None and run.finished_at is not None and run.worker == "w"
    assert [r.id for r in pg_app.list_runs(task="t")] == [str(i) for i in reversed(ids)]
    assert [r.id for r in pg_app.list_runs(status="succeeded")] == [str(i) for i in reversed(ids)]
    assert pg_app.list_runs(status="failed") == []
    assert pg_app.stats()["runs"]["succeeded"] == 5
    again = pg_app.retry(ids[0])  # a retry of a kept run is a new active run
    assert _where(pg_app, int(again.id)) == "runs"
    assert pg_app.get_run(again.id).retry_of == str(ids[0])  # type: ignore[attr-defined]


def test_runs_of_a_schedule_and_runs_that_did_not_succeed_stay(pg_app: rota.App) -> None:
    @pg_app.task(name="t")
    def t() -> None: ...

    pg_app.add_schedule("s", "t", every=3600, overlap="concurrent")
    ticked = int(pg_app.trigger("s").id)
    (done,) = _finish(pg_app)
    assert done == ticked and _where(pg_app, ticked) == "runs"
    assert pg_app.get_schedule("s").success_count == 1  # the trigger on rota_runs counted it
    failed = int(t.enqueue().id)
    _finish(pg_app, "failed")
    assert _where(pg_app, failed) == "runs" and pg_app.get_run(failed).status == "failed"


def test_a_dependent_is_released_when_its_parents_move(pg_app: rota.App) -> None:
    @pg_app.task(name="t")
    def t() -> None: ...

    first, second = t.enqueue(), t.enqueue()
    child = t.options(after=[first, second]).enqueue()
    assert pg_app.get_run(child.id).waiting_on == 2  # type: ignore[attr-defined]
    claimed = pg_app.store.claim("w", 10, None, 30.0)
    assert {c.id for c in claimed} == {int(first.id), int(second.id)}
    pg_app.store.finish([Outcome(c.id, c.token, "succeeded", result="1") for c in claimed])
    assert {_where(pg_app, c.id) for c in claimed} == {"history"}
    released = pg_app.get_run(child.id)
    assert (released.status, released.waiting_on) == ("pending", 0)  # type: ignore[attr-defined]
    assert [c.id for c in pg_app.store.claim("w", 10, None, 30.0)] == [int(child.id)]
    assert pg_app.run_links(child.id)["parents"] == [first.id, second.id]


def test_after_a_kept_run_waits_for_nothing(pg_app: rota.App) -> None:
    @pg_app.task(name="t")
    def t() -> None: ...

    parent = t.enqueue()
    _finish(pg_app)
    assert _where(pg_app, int(parent.id)) == "history"
    child = t.options(after=[parent]).enqueue()
    assert pg_app.get_run(child.id).status == "pending"
    assert [c.id for c in pg_app.store.claim("w", 10, None, 30.0)] == [int(child.id)]


def test_a_dependent_added_while_its_parent_finishes_is_released(pg_app: rota.App) -> None:
    """The enqueue locks the parent first; the finish waits for that lock, then moves the
    parent: the trigger must see the edge the enqueue committed meanwhile."""

    @pg_app.task(name="t")
    def t() -> None: ...

    parent = t.enqueue()
    (claimed,) = pg_app.store.claim("w", 1, None, 30.0)
    store: Any = pg_app.store
    finished: list[set[int]] = []
    with store._tx() as s:
        rows = s.q("lock_parents", ids=json.dumps([int(parent.id)]))
        assert [str(r[1]) for r in rows] == ["running"]
        finisher = threading.Thread(
            target=lambda: finished.append(store.finish([Outcome(claimed.id, claimed.token, "succeeded")]))
        )
        finisher.start()
        time.sleep(0.3)  # the finish waits on the parent's row lock
        assert not finished
        (child_id,) = [int(r[0]) for r in s.q_text("SELECT nextval('rota_run_id_seq')")]
        s.q_text(
            "INSERT INTO rota_runs (id, task, held, waiting_on, scheduled_for, due_at)"
            f" VALUES ({child_id}, 't', true, 1, now(), now())"
        )
        s.q("add_deps", ids=json.dumps([int(parent.id)]), child=child_id)
    finisher.join(10)
    assert finished == [{claimed.id}] and _where(pg_app, claimed.id) == "history"
    child = pg_app.get_run(child_id)
    assert (child.status, child.waiting_on) == ("pending", 0)  # type: ignore[attr-defined]


def test_a_unique_key_keeps_its_twin_after_it_moves(pg_app: rota.App) -> None:
    @pg_app.task(name="t")
    def t() -> None: ...

    first = t.options(key="k", unique_for=3600).enqueue()
    _finish(pg_app)
    assert _where(pg_app, int(first.id)) == "history"
    assert t.options(key="k", unique_for=3600).enqueue().id == first.id  # the twin, not a new run


def test_pruning_deletes_from_both_tables_and_forgets_their_edges(pg_app: rota.App) -> None:
    @pg_app.task(name="t")
    def t() -> None: ...

    pg_app.add_schedule("s", "t", every=3600, overlap="concurrent")
    kept = [int(t.options(key=f"k{i}", unique_for=3600).enqueue().id) for i in range(3)]
    ticked = int(pg_app.trigger("s").id)
    _finish(pg_app)
    child = t.options(after=[kept[0]]).enqueue()
    _finish(pg_app)
    assert _where(pg_app, ticked) == "runs" and _where(pg_app, int(child.id)) == "history"
    with pg_app.store._tx() as s:  # type: ignore[attr-defined]
        s.q_text("UPDATE rota_history SET finished_at = finished_at - interval '2 hours'")
        s.q_text(f"UPDATE rota_runs SET finished_at = finished_at - interval '2 hours' WHERE id = {ticked}")
    assert pg_app.store.prune("succeeded", 3600, 2) == 2  # the two oldest of both tables, together
    assert pg_app.store.prune("succeeded", 3600, 100) == 3
    assert {_where(pg_app, i) for i in (*kept, ticked, int(child.id))} == {"gone"}
    with pg_app.store._read() as s:  # type: ignore[attr-defined]
        assert s.q_text("SELECT count(*) FROM rota_deps")[0][0] == 0
        assert s.q_text("SELECT count(*) FROM rota_unique WHERE run_id IS NOT NULL")[0][0] == 0


def test_listings_of_failed_or_scheduled_runs_leave_the_history_out(pg_app: rota.App) -> None:
    """rota_history's CHECK lets the planner drop it from a listing that names another status
    or a schedule (constraint exclusion), so those listings cost what they did on one table."""
    with pg_app.store._read() as s:  # type: ignore[attr-defined]
        for where in ("status = 'failed'", "schedule = 's'"):
            plan = "\n".join(str(r[0]) for r in s.q_text(f"EXPLAIN SELECT id FROM rota_runs_all WHERE {where}"))
            assert "rota_history" not in plan, plan
        plan = "\n".join(str(r[0]) for r in s.q_text("EXPLAIN SELECT id FROM rota_runs_all WHERE task = 't'"))
        assert "rota_history" in plan


def test_the_sweep_moves_succeeded_runs_a_finish_left_behind(pg_app: rota.App, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs an earlier schema finished in place (and a transactional handler's) move in
    batches, each its own transaction; schedules' runs and unhappy ones stay."""
    from rota.worker import maintenance

    pg_app.store.insert_runs([NewRun(task="t") for _ in range(7)] + [NewRun(task="t", key="k")])
    with pg_app.store._tx() as s:  # type: ignore[attr-defined]
        s.q_text("UPDATE rota_runs SET status = 'succeeded', finished_at = now() WHERE key IS NULL")
    assert pg_app.store.move_history(3) == 3
    monkeypatch.setattr(maintenance, "SWEEP_SECONDS", 0.05)
    monkeypatch.setattr(maintenance, "SWEEP_BATCH", 2)

    @pg_app.task(name="t")
    def t() -> None: ...

    def counts() -> tuple[int, int]:
        with pg_app.store._read() as s:  # type: ignore[attr-defined]
            return tuple(int(s.q_text(f"SELECT count(*) FROM {t}")[0][0]) for t in ("rota_runs", "rota_history"))  # type: ignore[return-value]

    start_worker(pg_app, concurrency=1)
    wait_for(lambda: counts() == (0, 8), what="the worker's sweep (the keyed run ran, and moved in its finish)")
    assert [r.status for r in pg_app.list_runs()] == ["succeeded"] * 8


def _populate_version_16(store: Any) -> dict[str, int]:
    """Runs in every status on a version-16 database, ended with plain SQL (today's finish
    needs the history table), with an edge, a unique key's record and a schedule's run."""
    store.insert_runs([NewRun(task="t") for _ in range(6)] + [NewRun(task="t", key="k")])
    claimed = sorted(c.id for c in store.claim("old-worker", 5, None, 30.0))
    ids = dict(zip(("ok1", "ok2", "failed", "cancelled", "running"), claimed, strict=True))
    with store._tx() as s:
        for name, status in (
            ("ok1", "succeeded"),
            ("ok2", "succeeded"),
            ("failed", "failed"),
            ("cancelled", "cancelled"),
        ):
            s.q_text(
                f"UPDATE rota_runs SET status = '{status}', finished_at = now(), lease_until = NULL WHERE id = {ids[name]}"
            )
        ids["tick"] = int(s.q_text(
            "INSERT INTO rota_runs (task, schedule, tick, status, scheduled_for, due_at, started_at, finished_at)"
            " VALUES ('t', 's', now(), 'succeeded', now(), now(), now(), now()) RETURNING id"
        )[0][0])  # fmt: skip
        ids["child"] = int(s.q_text("SELECT max(id) FROM rota_runs WHERE status = 'pending' AND key IS NULL")[0][0])
        s.q_text(f"INSERT INTO rota_deps (parent, child) VALUES ({ids['ok1']}, {ids['child']})")
        s.q_text(f"INSERT INTO rota_unique (task, key, run_id, created_at) VALUES ('t', 'u', {ids['ok2']}, now())")
    return ids


def test_a_populated_version_16_database_migrates_and_its_runs_move_in_batches(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rota.stores.postgres import migrate as _pg_migrate
    from rota.stores.postgres import store as pg_module
    from rota.stores.sqlstore.queries import load_migrations

    from .test_hot_path import before_paused_queues

    with monkeypatch.context() as patch:
        patch.setattr(_pg_migrate, "load_migrations", lambda _d: load_migrations("postgres")[:16])
        load = pg_module.load_queries
        patch.setattr(pg_module, "load_queries", lambda *a: {k: before_paused_queues(v) for k, v in load(*a).items()})
        old = make_app(pg_url)
        assert old.migrate()[-1] == "0016_limit_told"
        ids = _populate_version_16(old.store)
        old.close()
    app = make_app(pg_url)
    try:
        assert app.migrate()[0] == "0017_history"  # (and any later ones)
        before = [(r.id, r.status) for r in app.list_runs(task="t")]
        assert len(before) == 8 and app.store.count_by_status()["succeeded"] == 3
        assert [app.store.move_history(1) for _ in range(3)] == [1, 1, 0]  # one batch, one transaction
        assert [_where(app, ids[n]) for n in ("ok1", "ok2", "tick", "failed", "running")] == [
            "history", "history", "runs", "runs", "runs"
        ]  # fmt: skip
        assert [(r.id, r.status) for r in app.list_runs(task="t")] == before
        assert app.run_links(ids["child"])["parents"] == [str(ids["ok1"])]  # the edge is kept

        @app.task(name="t")
        def t() -> None: ...

        assert t.options(key="u", unique_for=3600).enqueue().id == str(ids["ok2"])  # the twin is kept
        assert len(_finish(app)) == 2  # the pending ones, the keyed one included, move as they finish
        assert app.store.count_by_status() == {"succeeded": 5, "failed": 1, "cancelled": 1, "running": 1}
    finally:
        app.close()


def test_a_listing_by_task_probes_both_tables_by_the_ids_it_found(pg_app: rota.App) -> None:
    """The ids come from each table's task index, then each primary key is probed for them: a
    plan that walks the primary keys from the newest run (an IN semi-join) took 45 ms for a
    task's last 50 runs at 2,000,000 kept."""
    from rota.stores.base import RunFilter

    store: Any = pg_app.store
    suffix, params = store._runs_where(RunFilter(task="task-3", limit=50))
    with store._tx() as s:  # a history big enough for the planner to pick as it does at millions
        s.q_text(
            "INSERT INTO rota_history (id, task, status, scheduled_for, due_at, finished_at)"
            " SELECT i, 'task-' || (i %% 19), 'succeeded', now(), now(), now() FROM generate_series(1, 50000) i"
        )
        s.q_text("ANALYZE rota_history")
    with store._read() as s:
        plan = "\n".join(str(r[0]) for r in s.q_text("EXPLAIN " + store.queries["run_columns"] + suffix, **params))
    assert "Semi Join" not in plan and "Index Cond: (id = ANY" in plan, plan


def test_a_chart_reads_its_buckets_in_one_statement_with_the_pipelines_answers(
    pg_app: rota.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dashboard's buckets, read LATERAL in one statement (planned once over both tables),
    answer as one statement per bucket does: runs of both tables, in each bucket."""
    from rota.stores.postgres import lists as _pg_lists

    @pg_app.task(name="t")
    def t() -> None: ...

    for _ in range(6):
        t.enqueue()
    _finish(pg_app, n=4)  # four moved to the history
    _finish(pg_app, "failed")  # two stay
    now = time.time()
    params = [{"lo": now - 3600 + i * 600, "hi": now - 3000 + i * 600, "cap": 100} for i in range(7)]
    with_task = [{**p, "cap": 3, "task": "t", "queue": None} for p in params]
    lateral = [pg_app.store.web_rows(q, ps) for q, ps in (("web_throughput", params), ("web_lateness", with_task))]
    monkeypatch.setattr(_pg_lists, "_same_but_bounds", lambda _p, _first: False)
    piped = [pg_app.store.web_rows(q, ps) for q, ps in (("web_throughput", params), ("web_lateness", with_task))]
    assert lateral == piped
    assert sum(rows[0][0] for rows in lateral[0]) == 6 and sum(rows[0][3] for rows in lateral[0]) == 4
    assert sum(len(rows) for rows in lateral[1]) == 3  # the cap, per bucket
