"""Operators without the App's code (issue 44): queues paused fleet-wide, schedules and runs
changed from the CLI as data, the declared task names workers store."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import rota
from rota.cli import main
from rota.stores.postgres.claim_from import FRONT

from .conftest import WITH_MYSQL, make_app, store_url
from .procs import WorkerProcs, wait_until


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def cli(url: str, *args: str) -> tuple[int, str]:
    result = CliRunner(env={"COLUMNS": "300"}).invoke(main, ["--database-url", url, *args])
    return result.exit_code, result.output


def _status(app: rota.App, ids: list[str]) -> list[str]:
    return [app.get_run(i).status for i in ids]


def _insert(app: rota.App, call: Any, n: int) -> list[str]:
    """Runs of a test app's task, inserted through `app` (the test's database)."""
    return [str(i) for i, _ in app.store.insert_runs([call._new_run((i,), {}) for i in range(n)])]


@pytest.mark.slow
def test_a_paused_queue_is_skipped_by_every_worker_until_resumed(
    db_url: str, procs: WorkerProcs, tmp_path: Path
) -> None:
    """Two worker processes, paused through the database only: neither claims the paused
    queue's runs (other queues go on), a run already running finishes, and after the resume
    both drain it at their next poll."""
    from .apps.basic import noop, sleep

    app = make_app(db_url)
    procs.start(concurrency=2)
    procs.start(concurrency=2)
    wait_until(lambda: sum(w.alive for w in app.list_workers()) == 2, 60, "both workers to start")
    ((first, _),) = app.store.insert_runs([sleep.options(queue="mail")._new_run((1.0,), {})])
    running = str(first)
    wait_until(lambda: app.get_run(running).status == "running", 30, "the long run to start")
    assert cli(db_url, "queues", "pause", "mail")[0] == 0
    mail = _insert(app, noop.options(queue="mail"), 6)
    other = _insert(app, noop.options(), 6)
    wait_until(lambda: _status(app, other) == ["succeeded"] * 6, 60, "the other queue to drain")
    wait_until(lambda: app.get_run(running).status == "succeeded", 30, "the running run to finish")
    time.sleep(1.0)  # twenty polls of each worker
    assert _status(app, mail) == ["pending"] * 6
    code, out = cli(db_url, "queues", "--json")
    listed = {q["name"]: q for q in json.loads(out)}
    assert code == 0 and listed["mail"]["paused"] and listed["mail"]["pending"] == 6, out
    code, out = cli(db_url, "status", "--json")
    assert json.loads(out)["paused_queues"] == ["mail"]
    assert "paused:   queues mail" in cli(db_url, "status")[1]
    assert cli(db_url, "queues", "resume", "mail")[0] == 0
    wait_until(lambda: _status(app, mail) == ["succeeded"] * 6, 60, "the resumed queue to drain")
    assert cli(db_url, "status", "--json")[1].count('"paused_queues": []') == 1
    app.close()


def test_a_paused_queue_holds_limited_runs_too(app_factory: Any) -> None:
    """The flow claim (runs of a limit) skips a paused queue as the plain claim does."""
    app = app_factory()
    task = app.task(name="limited", limit=2, queue="mail")(lambda: None)
    plain = app.task(name="plain", queue="mail")(lambda: None)
    app.prepare()
    app.pause_queue("mail", by="test")
    runs = [task.enqueue().id, plain.enqueue().id]
    worker = app.worker(install_signal_handlers=False)
    worker.start()
    try:
        time.sleep(0.6)
        assert _status(app, runs) == ["pending", "pending"]
        app.resume_queue("mail")
        wait_until(lambda: _status(app, runs) == ["succeeded"] * 2, 30, "the runs after the resume")
    finally:
        worker.stop(wait=True, timeout=10)


def test_queue_names_are_checked(app_factory: Any) -> None:
    app = app_factory()
    app.migrate()
    with pytest.raises(rota.ConfigurationError, match="invalid queue name 'a b'"):
        app.pause_queue("a b")
    code, out = cli(app.database_url, "queues", "pause", "a b")
    assert code == 1 and "invalid queue name" in out


@pytest.mark.postgres
def test_the_claim_keeps_its_index_with_the_paused_queues_guard(pg_url: str) -> None:
    """The claim's NOT EXISTS on rota_queue_pauses is an anti-join on a tiny table: the
    candidates still come from rota_runs_claim in order (no sort, no sequential scan)."""
    import psycopg

    app = rota.App(pg_url)
    task = app.task(name="t")(lambda: None)
    app.migrate()
    app.prepare()
    task.enqueue_many([((), {}) for _ in range(3000)])
    app.pause_queue("mail")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("ANALYZE rota_runs")
        conn.execute("ANALYZE rota_queue_pauses")
    store: Any = app.store
    params = {"owner": "w", "limit": 10, "start": 10, "lease": 30.0, "now": None, "queues": ["default"], **FRONT}
    with store._tx() as s:
        s.q("claim_plan")  # as every claim's transaction
        for query in ("claim", "claim_in_queues"):
            plan = "\n".join(str(r[0]) for r in s.q_text("EXPLAIN " + store.queries[query], **params))
            assert "rota_runs_claim_from" in plan and "Seq Scan on rota_runs " not in plan, plan
            assert "rota_queue_pauses" in plan, plan
    app.close()


# -- item 10: --json, async twins, worker.concurrency -------------------------------------------
def test_pause_resume_and_migrate_print_json(db_url: str) -> None:
    app = make_app(db_url)
    app.add_schedule("nightly", "t", cron="0 3 * * *")
    code, out = cli(db_url, "migrate", "--json")
    assert code == 0 and json.loads(out)["applied"] == [] and json.loads(out)["version"] == json.loads(out)["latest"]
    code, out = cli(db_url, "pause", "nightly", "--json")
    assert code == 0 and json.loads(out)["paused"] is True and json.loads(out)["name"] == "nightly"
    code, out = cli(db_url, "resume", "nightly", "--json")
    assert code == 0 and json.loads(out)["paused"] is False and json.loads(out)["next_run_at"]
    app.close()


def test_every_client_operation_has_its_async_twin() -> None:
    """The client's public operations (rota.client.Client, the queue operations) and the
    locks' and migrate: each has `<name>_async` with the same parameters."""
    import inspect

    from rota.aio import CLIENT_OPERATIONS
    from rota.client import Client
    from rota.operate import OperatorClient

    public = {
        n for cls in (Client, OperatorClient) for n, v in vars(cls).items() if callable(v) and not n.startswith("_")
    }
    wanted = (public - {"check_declared"}) | {"list_locks", "try_lock", "migrate"}
    assert wanted <= set(CLIENT_OPERATIONS), sorted(wanted - set(CLIENT_OPERATIONS))
    for name in wanted:
        sync, asynchronous = getattr(rota.App, name), getattr(rota.App, f"{name}_async")
        assert inspect.iscoroutinefunction(asynchronous), name
        assert inspect.signature(sync).parameters.keys() == inspect.signature(asynchronous).parameters.keys(), name


def test_async_twins_of_schedules_locks_and_migrate(app_factory: Any) -> None:
    import asyncio

    app = app_factory()
    app.task(name="t")(lambda: None)

    async def scenario() -> None:
        assert await app.migrate_async(dry_run=True) is not None
        await app.migrate_async()
        info = await app.add_schedule_async("s", "t", every=60)
        assert info.every == timedelta(seconds=60)
        assert (await app.update_schedule_async("s", every=120)).every == timedelta(seconds=120)
        lease = await app.try_lock_async("job", ttl=30)
        assert lease is not None and [lk.name for lk in await app.list_locks_async()] == ["job"]
        lease.release()
        await app.remove_schedule_async("s")
        assert not (await app.get_schedule_async("s")).active
        assert (await app.pause_queue_async("mail")).paused
        assert [q.name for q in await app.list_queues_async()] == ["mail"]
        assert not (await app.resume_queue_async("mail")).paused

    asyncio.run(scenario())


def test_setting_concurrency_on_a_worker_is_refused_not_ignored(app_factory: Any) -> None:
    app = app_factory()
    app.task(name="t")(lambda: None)
    worker = app.worker(concurrency=2, install_signal_handlers=False)
    worker.start()
    try:
        with pytest.raises(rota.ConfigurationError, match="cannot set concurrency=8 on worker .*: it has 2 slots"):
            worker.concurrency = 8
        assert worker.concurrency == 2
        worker.concurrency = 2  # the same value: nothing to change
    finally:
        worker.stop(wait=True, timeout=10)


# -- item 5: schedules and runs without a deploy --------------------------------------------------
def _declared(db_url: str) -> rota.App:
    """An app whose worker declared `report` (rota_tasks): another process may name it."""
    app = make_app(db_url)

    @app.task(name="report")
    def report(day: str = "today") -> str:
        return day

    app.prepare()
    return app


def test_schedules_are_added_updated_and_removed_from_the_cli(db_url: str) -> None:
    app = _declared(db_url)
    code, out = cli(db_url, "schedules", "add", "daily", "report", "--cron", "0 6 * * *", "--tz", "Europe/Paris",
                    "--kwargs", '{"day": "yesterday"}', "--queue", "reports", "--retries", "2", "--json")  # fmt: skip
    info = json.loads(out)
    assert code == 0 and info["cron"] == "0 6 * * *" and info["tz"] == "Europe/Paris", out
    assert info["kwargs"] == {"day": "yesterday"} and info["next_run_at"]
    code, out = cli(db_url, "schedules", "update", "daily", "--every", "15m", "--json")
    assert code == 0 and json.loads(out)["every"] == 900 and json.loads(out)["cron"] is None, out
    assert cli(db_url, "pause", "daily")[0] == 0 and app.get_schedule("daily").paused
    assert cli(db_url, "resume", "daily")[0] == 0
    code, out = cli(db_url, "trigger", "daily", "--json")
    assert code == 0 and json.loads(out)["task"] == "report" and json.loads(out)["queue"] == "reports"
    code, out = cli(db_url, "schedules", "remove", "daily", "--log-level", "info", "--log-format", "json")
    assert code == 0 and not app.get_schedule("daily").active
    audit = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [(a["event"], a["action"], a["target"]) for a in audit] == [("operator_change", "schedule_remove", "daily")]
    assert audit[0]["by"].startswith("cli:") and audit[0]["message"].startswith("schedule_remove daily by cli:")
    app.close()


def test_an_unknown_task_is_refused_not_stored(db_url: str) -> None:
    app = _declared(db_url)
    code, out = cli(db_url, "schedules", "add", "daily", "reprot", "--every", "60")
    assert code == 1 and "unknown task 'reprot' (did you mean 'report'?)" in out, out
    assert app.list_schedules(include_inactive=True) == []
    code, out = cli(db_url, "enqueue", "reprot")
    assert code == 1 and "unknown task 'reprot'" in out, out
    code, out = cli(db_url, "schedules", "add", "daily", "report", "--every", "60", "--overlap", "sometimes")
    assert code == 1 and "overlap" in out and "sometimes" in out, out  # the Python API's own check
    assert app.list_schedules(include_inactive=True) == []
    app.close()


def test_a_declared_task_is_enqueued_without_its_app(db_url: str) -> None:
    app = _declared(db_url)
    code, out = cli(
        db_url, "enqueue", "report", "--kwargs", '{"day": "monday"}', "--queue", "q1", "--priority", "3", "--json"
    )
    assert code == 0, out
    run = app.get_run(json.loads(out)["id"])
    assert (run.task, run.kwargs, run.queue, run.priority, run.status) == (
        "report",
        {"day": "monday"},
        "q1",
        3,
        "pending",
    )
    code, out = cli(db_url, "enqueue", "report", "--key", "k")
    code2, out2 = cli(db_url, "enqueue", "report", "--key", "k")
    assert code == code2 == 0 and out2.startswith(out.strip()) and "already pending" in out2
    app.close()


def test_the_api_changes_schedules_queues_and_runs_as_data(db_url: str, caplog: Any) -> None:
    """Behind the token and the cross-site check like every POST; each change logged once
    with who made it; an unknown task refused, not stored."""
    from starlette.testclient import TestClient

    from rota.web import create_app

    app = _declared(db_url)
    web = TestClient(create_app(app, token="s3cret-token"), base_url="http://localhost")
    auth = {"authorization": "Bearer s3cret-token"}
    new = {"name": "daily", "task": "report", "cron": "0 6 * * *", "kwargs": {"day": "x"}, "notify_on": ["failure"]}
    assert web.post("/api/schedules", json=new).status_code == 401
    refused = web.post("/api/schedules", json=new, headers={**auth, "origin": "https://evil.example"})
    assert refused.status_code == 403 and refused.json() == {"error": "cross-site request refused"}
    caplog.set_level("INFO", logger="rota")
    typo = web.post("/api/schedules", json={**new, "task": "reprot"}, headers=auth)
    assert typo.status_code == 400 and "unknown task 'reprot'" in typo.json()["error"]
    bad = web.post("/api/schedules", json={**new, "every": "often"}, headers=auth)
    assert bad.status_code == 400 and bad.json() == {
        "error": "every must be a number of seconds (90, not '90s'), got 'often'"
    }
    late = web.post("/api/tasks/report/enqueue", json={"delay": "5m"}, headers=auth)  # it said "a number" only
    assert late.status_code == 400 and late.json() == {
        "error": "delay must be a number of seconds (90, not '90s'), got '5m'"
    }
    assert web.post("/api/schedules", json={**new, "priority": "high"}, headers=auth).json() == {
        "error": "priority must be an integer, got 'high'"
    }
    assert app.list_schedules(include_inactive=True) == []
    added = web.post("/api/schedules", json=new, headers=auth)
    assert added.status_code == 201 and added.json()["cron"] == "0 6 * * *", added.text
    changed = web.post("/api/schedules/daily/update", json={"every": 600}, headers=auth)
    assert changed.status_code == 200 and changed.json()["every"] == 600
    assert web.get("/api/tasks", headers=auth).json() == ["report"]
    run = web.post("/api/tasks/report/enqueue", json={"kwargs": {"day": "y"}, "queue": "mail"}, headers=auth)
    assert run.status_code == 201 and app.get_run(run.json()["id"]).queue == "mail"
    paused = web.post("/api/queues/mail/pause", headers=auth)
    assert (
        paused.status_code == 200 and paused.json()["paused"] and paused.json()["paused_by"] == "dashboard:testclient"
    )
    assert [q["name"] for q in web.get("/api/queues", headers=auth).json() if q["paused"]] == ["mail"]
    assert not web.post("/api/queues/mail/resume", headers=auth).json()["paused"]
    removed = web.post("/api/schedules/daily/remove", headers=auth)
    assert removed.status_code == 200 and removed.json()["active"] is False
    audit = [(r.fields["action"], r.fields["target"], r.fields["by"]) for r in caplog.records  # type: ignore[attr-defined]
             if getattr(r, "event", None) == "operator_change"]  # fmt: skip
    assert audit == [
        ("schedule_add", "daily", "dashboard:testclient"),
        ("schedule_update", "daily", "dashboard:testclient"),
        ("enqueue", "report", "dashboard:testclient"),
        ("queue_pause", "mail", "dashboard:testclient"),
        ("queue_resume", "mail", "dashboard:testclient"),
        ("schedule_remove", "daily", "dashboard:testclient"),
    ]
    app.close()


def test_notify_on_works_for_a_schedule_added_as_data(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A running worker's notifier sends the events a stored schedule's notify_on selects (it
    sent only its own events=; add_schedule refused notify_on)."""
    from rota import operate
    from rota.notify import Notifier

    monkeypatch.setattr(operate, "NOTIFY_ON_REFRESH", 0.1)
    sent: list[tuple[str, str | None]] = []

    class Collect(Notifier):
        def send(self, event: Any) -> None:
            sent.append((event.name, event.schedule_name))

    app = _declared(db_url)
    app.add_notifier(Collect())  # its own events: run_failed only
    worker = app.worker(install_signal_handlers=False)
    worker.start()
    try:
        code, out = cli(db_url, "schedules", "add", "daily", "report", "--cron", "0 6 * * *", "--notify-on", "success")
        assert code == 0, out
        time.sleep(0.6)  # the worker reads the stored notify_on
        assert cli(db_url, "trigger", "daily")[0] == 0
        wait_until(lambda: ("run_succeeded", "daily") in sent, 30, "the success notification")
        code, out = cli(db_url, "schedules", "add", "bad", "report", "--every", "60", "--notify-on", "sometimes")
        assert code == 1 and "unknown notify_on value 'sometimes'" in out, out
    finally:
        worker.stop(wait=True, timeout=10)
        app.close()
