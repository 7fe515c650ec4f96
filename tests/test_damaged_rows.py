"""One damaged stored row never stops the fleet (issue 41 items 7, 8 and 14), on both stores.

Rows are damaged by hand, with SQL, as an older release, a manual edit or a bad migration
would leave them: a schedule whose `every`, `misfire_grace` or `jitter` cannot be planned
(NaN, Infinity, 1e300, negative, 0), a task's stored limit and rate spec that does not decode,
and `rota_workers` / `rota_locks` rows whose times, JSON or numbers cannot be read. Each is
set aside through rota.quarantine with one warning (event row_damaged) naming it; the good
schedules keep firing, the worker starts, and every listing, `rota status`, the API and
/metrics answer. SQLite's STRICT tables cannot hold NaN or text in a number column: there the
damage is what they can hold (Infinity, 1e300, negative, 0, out-of-range times).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

import rota
from rota import quarantine
from rota.cli import main
from rota.web import create_app

from . import mysql_db
from .conftest import WITH_MYSQL, start_worker, store_url, wait_for
from .procs import WorkerProcs, wait_until
from .test_ticks_ahead import START, minute, runs_of, tick_pass


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


@pytest.fixture(autouse=True)
def _named_afresh() -> None:
    quarantine.forget()  # each test sees its own first warning


def _sql(app: rota.App, text: str, **params: Any) -> None:
    """Run `text` with `{name}` standing for each parameter's placeholder."""
    store: Any = app.store
    if store.dialect == "mysql" and not params:  # as a hand edit would: without strict mode
        mysql_db.execute(app.database_url, text)
        return
    with store._tx() as s:
        s.q_text(text.format(**{name: store._p(name) for name in params}) if params else text, **params)


def _now(app: rota.App) -> str:
    sqlite = "CAST((julianday('now') - 2440587.5) * 86400 AS INTEGER)"  # whole seconds
    return {"postgresql": "now()", "mysql": "UTC_TIMESTAMP(6)"}.get(app.store.dialect, sqlite)  # type: ignore[attr-defined]


def _pg(app: rota.App) -> bool:
    return bool(app.store.dialect == "postgresql")


def _value(app: rota.App, how: str) -> str:
    """A number no release writes, as SQL for the store (None: it cannot hold it)."""
    pg = {"nan": "'NaN'", "infinity": "'Infinity'", "1e300": "1e300", "negative": "-5", "zero": "0"}
    pg |= {"huge": "10000000", "not-json": "'not json'", "a-list": "'[1]'", "an-object": "'{}'", "word": "'nope'"}
    sqlite = {**pg, "nan": "", "infinity": "9e999"}
    mysql = {**pg, "nan": "", "infinity": "1e308"}  # DOUBLE holds neither NaN nor Infinity
    return {"postgresql": pg, "mysql": mysql}.get(app.store.dialect, sqlite)[how]  # type: ignore[attr-defined]


# The column each damaged schedule's name starts with.
FIELD_OF = {"every": "every", "grace": "misfire_grace", "jitter": "jitter", "timeout": "timeout",
            "priority": "priority", "attempts": "max_attempts", "args": "args", "kwargs": "kwargs",
            "overlap": "overlap", "misfire": "misfire"}  # fmt: skip
# (schedule name, column, value): each one that every worker must set aside
SCHEDULE_DAMAGE = [
    *((f"every-{how}", "every", how) for how in ("nan", "infinity", "1e300", "negative", "zero")),
    *((f"grace-{how}", "misfire_grace", how) for how in ("nan", "infinity", "1e300", "negative")),
    *((f"jitter-{how}", "jitter", how) for how in ("nan", "infinity", "1e300", "negative")),
    *((f"timeout-{how}", "timeout", how) for how in ("nan", "negative")),
    ("priority-huge", "priority", "huge"),
    ("attempts-zero", "max_attempts", "zero"),
    ("args-not-json", "args", "not-json"),
    ("args-an-object", "args", "an-object"),
    ("kwargs-a-list", "kwargs", "a-list"),
    ("overlap-word", "overlap", "word"),
    ("misfire-word", "misfire", "word"),
]


def _damage_schedules(app: rota.App) -> list[str]:
    """The damaged schedules (due now), added first through the API; their names."""
    names = []
    for name, column, how in SCHEDULE_DAMAGE:
        value = _value(app, how)
        if not value:
            continue
        app.add_schedule(name, "t", every=3600, jitter=60 if column == "jitter" else None)
        _sql(app, f"UPDATE rota_schedules SET {column} = {value}, next_run_at = {_now(app)} WHERE name = '{name}'")
        names.append(name)
    return names


def _named(caplog: pytest.LogCaptureFixture, kind: str) -> dict[str, int]:
    """How many row_damaged warnings name each row of `kind`."""
    counts: dict[str, int] = {}
    for record in caplog.records:
        fields = getattr(record, "fields", {}) or {}
        if getattr(record, "event", None) == "row_damaged" and fields.get("kind") == kind:
            counts[fields["key"]] = counts.get(fields["key"], 0) + 1
    return counts


def test_a_worker_starts_sets_each_damaged_schedule_aside_once_and_fires_the_others(
    app: rota.App, caplog: pytest.LogCaptureFixture
) -> None:
    app.task(name="t")(lambda: None)
    bad = _damage_schedules(app)
    app.add_schedule("good", "t", every=1, run_immediately=True)
    caplog.set_level(logging.WARNING, logger="rota")
    worker = start_worker(app)
    wait_for(lambda: len(app.list_runs(schedule="good", status="succeeded")) >= 3, what="the good schedule to fire")
    assert worker.state == "running"
    wait_for(lambda: all(app.get_schedule(n).plan_error for n in bad), what="each damaged schedule to be recorded")
    for name in bad:
        assert app.list_runs(schedule=name) == [], name
        info = app.get_schedule(name)
        assert info.damage is not None and info.plan_error == f"damaged row: {info.damage}", name
        assert FIELD_OF[name.split("-")[0]] in info.damage and info.next_run_at is None, info
    assert _named(caplog, "schedule") == dict.fromkeys(bad, 1)
    assert not [r for r in caplog.records if "role failed" in r.getMessage()]


def test_listings_api_and_metrics_show_each_damaged_schedule(app: rota.App) -> None:
    app.task(name="t")(lambda: None)
    bad = _damage_schedules(app)
    app.add_schedule("good", "t", every=60)
    items = {s.name: s for s in app.list_schedules()}
    assert items["good"].corrupt == () and items["good"].damage is None
    for name in bad:
        field = FIELD_OF[name.split("-")[0]]
        assert items[name].corrupt == (field,), items[name]
        assert items[name].damage is not None and items[name].damage.startswith(f"{field}=")
    url = app.database_url
    listed = CliRunner(env={"COLUMNS": "250"}).invoke(main, ["--database-url", url, "schedules"])
    assert listed.exit_code == 0, listed.output
    assert f"damaged: {items[bad[0]].damage}"[:40] in listed.output
    as_json = CliRunner().invoke(main, ["--database-url", url, "schedules", "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert {s["name"]: s["damage"] for s in json.loads(as_json.output)}[bad[0]] == items[bad[0]].damage
    with TestClient(create_app(app), base_url="http://127.0.0.1") as client:
        api = client.get("/api/schedules")
        assert api.status_code == 200 and {s["name"] for s in api.json()} == {*bad, "good"}
        metrics = client.get("/metrics")
        assert metrics.status_code == 200 and "rota_up 1.0" in metrics.text
        assert 'rota_schedule_next_run_timestamp_seconds{schedule="good"}' in metrics.text


@pytest.mark.parametrize(
    "values",
    [
        {"every": float("nan")},
        {"every": float("inf")},
        {"every": 1e300},
        {"every": -1},
        {"every": 0},
        {"misfire_grace": float("nan")},
        {"misfire_grace": float("inf")},
        {"misfire_grace": -1},
        {"jitter": float("nan")},
        {"jitter": 1e300},
        {"jitter": -1},
    ],
    ids=lambda v: "-".join(f"{k}={w}" for k, w in v.items()),
)
def test_the_api_refuses_what_cannot_be_planned_with_one_line(app: rota.App, values: dict[str, Any]) -> None:
    """A guard: these were refused before issue 41 too (the test of a new refusal is below)."""
    _refused(app, values)


@pytest.mark.parametrize("grace", [1e300, 10**12, timedelta(days=3651)], ids=str)
def test_the_api_refuses_a_misfire_grace_past_ten_years(app: rota.App, grace: Any) -> None:
    _refused(app, {"misfire_grace": grace})  # 1e300 was an OverflowError, 1e12 stored and unplannable


def _refused(app: rota.App, values: dict[str, Any]) -> None:
    """add_schedule and update_schedule refuse `values` in one line naming the field."""
    app.task(name="t")(lambda: None)
    with pytest.raises(rota.ConfigurationError) as refused:
        app.add_schedule("s", "t", **{"every": 60, **values})
    (field,) = values
    assert field in str(refused.value) and "\n" not in str(refused.value)
    app.add_schedule("s", "t", every=60)
    with pytest.raises(rota.ConfigurationError, match=field):
        app.update_schedule("s", **values)
    stored = app.get_schedule("s")  # nothing bad was stored
    assert stored.every == timedelta(seconds=60) and stored.misfire_grace == timedelta(seconds=60)


def test_update_schedule_repairs_a_damaged_schedule_and_names_what_is_left(app: rota.App) -> None:
    app.task(name="t")(lambda: None)
    app.add_schedule("s", "t", every=3600)
    _sql(app, f"UPDATE rota_schedules SET every = {_value(app, 'infinity')} WHERE name = 's'")
    with pytest.raises(
        quarantine.DamagedRowError, match=r"schedule 's' is damaged \(every=(inf|1e\+308) .*update_schedule"
    ):
        app.update_schedule("s", misfire="skip")
    with pytest.raises(quarantine.DamagedRowError, match="schedule 's' is damaged"):
        app.trigger("s")
    repaired = app.update_schedule("s", every=600)
    assert repaired.damage is None and repaired.corrupt == () and repaired.next_run_at is not None
    assert app.trigger("s").refresh().status in ("pending", "running")


def test_rota_trigger_of_a_damaged_schedule_is_one_line(app: rota.App) -> None:
    app.task(name="t")(lambda: None)
    app.add_schedule("s", "t", every=3600)
    _sql(app, "UPDATE rota_schedules SET misfire_grace = -5 WHERE name = 's'")
    result = CliRunner().invoke(main, ["--database-url", app.database_url, "trigger", "s"])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert "schedule 's' is damaged (misfire_grace=-5" in result.output


# Stored limit and rate specs that do not decode: not JSON, a missing key, a wrong type.
DAMAGED_SPECS = [
    "x{",
    '{"limit": {}}',
    '{"limit": {"name": 5, "by": null}}',
    '{"rate": {"name": "r", "by": [{}]}}',
    "[]",
]


def _spec(app: rota.App, task: str, spec: str) -> None:
    _sql(app, f"DELETE FROM rota_task_flow WHERE task = '{task}'")
    _sql(
        app, f"INSERT INTO rota_task_flow (task, spec, updated_at) VALUES ('{task}', {{spec}}, {_now(app)})", spec=spec
    )


@pytest.mark.parametrize("spec", DAMAGED_SPECS)
def test_rota_trigger_and_retry_on_a_damaged_task_spec_wait_for_a_declaring_worker(
    app_factory: Any, spec: str, caplog: pytest.LogCaptureFixture
) -> None:
    """No traceback and nothing lost: the trigger and the retry are made, unresolved (never
    unlimited), for a worker that declares the task to key; the spec is named once."""
    declaring = app_factory()
    declaring.task(name="lim", limit=rota.Limit(1))(lambda: None)
    run = declaring.get_task("lim").enqueue()
    declaring.cancel(run.id)
    declaring.add_schedule("limited", "lim", every=3600)
    _spec(declaring, "lim", spec)
    url = declaring.database_url
    caplog.set_level(logging.WARNING, logger="rota")
    for args in (["trigger", "limited"], ["retry", run.id]):
        result = CliRunner().invoke(main, ["--database-url", url, *args])
        assert result.exit_code == 0, result.output
        assert "Traceback" not in result.output, result.output
    waiting = declaring.list_runs(task="lim", status="pending")
    assert len(waiting) == 2
    assert _named(caplog, "task spec") == {"lim": 1}


def test_a_damaged_task_spec_never_stops_the_ticks_of_other_schedules(
    app_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    app = app_factory()
    app.task(name="t")(lambda: None)  # this worker does not declare "lim": it reads the stored spec
    app.add_schedule("limited", "lim", every=1, run_immediately=True)
    app.add_schedule("good", "t", every=1, run_immediately=True)
    _spec(app, "lim", '{"limit": {}}')
    caplog.set_level(logging.WARNING, logger="rota")
    worker = start_worker(app)
    wait_for(lambda: len(app.list_runs(schedule="good", status="succeeded")) >= 3, what="the good schedule to fire")
    assert worker.state == "running"
    waiting = app.list_runs(schedule="limited")
    # unresolved, for a worker declaring "lim" (the later ticks meet it under overlap=skip)
    assert "pending" in {r.status for r in waiting} and {r.status for r in waiting} <= {"pending", "skipped"}
    assert _named(caplog, "task spec") == {"lim": 1}
    assert not [r for r in caplog.records if "role failed" in r.getMessage()]


def _damage_registry(app: rota.App) -> tuple[list[str], list[str]]:
    """Worker and lock rows, each with one column no release writes; their keys."""
    pg, my = _pg(app), app.store.dialect == "mysql"  # type: ignore[attr-defined]
    now, far = _now(app), "'infinity'" if pg else mysql_db.ZERO_DATE if my else "1e300"
    before = "'-infinity'" if pg else mysql_db.ZERO_DATE if my else "-1e300"
    workers = {
        "w-started": {"started_at": far},
        "w-seen": {"last_seen": before},
        "w-seen-late": {"last_seen": "'20000-01-01 00:00:00+00'" if pg else mysql_db.ZERO_DATE if my else "9e999"},
        "w-queues": {"queues": "'not json'"},
        "w-queues-type": {"queues": "'{\"a\": 1}'"},
        "w-pid": {"pid": "-7"},
        "w-concurrency": {"concurrency": "-3"},
        "w-stuck": {"stuck": "-1"},
        "w-lease": {"lease": "-5"},  # issue 44: each worker's own lease, judged in SQL too
        "w-lease-far": {"lease": "1e300" if my else far},
        "w-lease-nan": {"lease": "'NaN'" if pg else "1e30"},
    }
    for key, bad in workers.items():
        row = {"id": f"'{key}'", "host": "'h'", "pid": "1", "concurrency": "4", "queues": "NULL",
               "state": "'running'", "started_at": now, "last_seen": now, "stuck": "0", **bad}  # fmt: skip
        _sql(app, f"INSERT INTO rota_workers ({', '.join(row)}) VALUES ({', '.join(row.values())})")
    locks = {"l-token": {"token": "-9"}, "l-acquired": {"acquired_at": far}, "l-expires": {"expires_at": before}}
    for key, bad in locks.items():
        row = {"name": f"'{key}'", "owner": "'o'", "token": "1", "acquired_at": now, "expires_at": now, **bad}
        _sql(app, f"INSERT INTO rota_locks ({', '.join(row)}) VALUES ({', '.join(row.values())})")
    return list(workers), list(locks)


def test_damaged_worker_and_lock_rows_are_listed_and_never_break_status_api_or_metrics(
    app: rota.App, caplog: pytest.LogCaptureFixture
) -> None:
    workers, locks = _damage_registry(app)
    caplog.set_level(logging.WARNING, logger="rota")
    listed = {w.id: w for w in app.list_workers()}
    assert set(workers) <= set(listed)
    for key in workers:
        assert listed[key].corrupt, listed[key]
    assert not listed["w-seen"].alive and not listed["w-seen-late"].alive
    assert listed["w-queues"].corrupt == ("queues",) and listed["w-queues"].queues is None
    for key in ("w-lease", "w-lease-far", "w-lease-nan"):  # judged by the viewer's lease instead
        assert listed[key].corrupt == ("lease",) and listed[key].lease is None and listed[key].alive, listed[key]
    held = {lk.name: lk for lk in app.list_locks()}
    assert all(held[key].corrupt for key in locks), held
    stats = app.stats()
    assert stats["capacity"] >= 0 and stats["stuck"] >= 0
    url = app.database_url
    for command in (
        ["status"],
        ["workers"],
        ["locks"],
        ["status", "--json"],
        ["workers", "--json"],
        ["locks", "--json"],
    ):
        result = CliRunner(env={"COLUMNS": "250"}).invoke(main, ["--database-url", url, *command])
        assert result.exit_code == 0, (command, result.output)
        assert "Traceback" not in result.output
    shown = CliRunner().invoke(main, ["--database-url", url, "workers", "--json"])
    assert {w["id"]: w["corrupt"] for w in json.loads(shown.output)}["w-queues"] == ["queues"]
    with TestClient(create_app(app), base_url="http://127.0.0.1") as client:
        for path in ("/api/stats", "/api/workers", "/api/locks"):
            assert client.get(path).status_code == 200, path
        assert {w["id"]: w["corrupt"] for w in client.get("/api/workers").json()}["w-started"] == ["started_at"]
        assert {lk["name"]: lk["corrupt"] for lk in client.get("/api/locks").json()}["l-token"] == ["token"]
        metrics = client.get("/metrics")
        assert metrics.status_code == 200 and "rota_up 1.0" in metrics.text, metrics.text
    assert _named(caplog, "worker") == dict.fromkeys(workers, 1)
    assert _named(caplog, "lock") == dict.fromkeys(locks, 1)


def test_a_worker_starts_beside_damaged_registry_rows(app: rota.App) -> None:
    app.task(name="t")(lambda: None)
    app.add_schedule("good", "t", every=1, run_immediately=True)
    _damage_registry(app)
    worker = start_worker(app)
    wait_for(lambda: len(app.list_runs(schedule="good", status="succeeded")) >= 2, what="the good schedule to fire")
    assert worker.state == "running"
    assert worker.id in {w.id for w in app.list_workers() if w.alive}


@pytest.fixture
def fake() -> rota.FakeClock:
    return rota.FakeClock(START)


@pytest.fixture
def fapp(app_factory: Any, fake: rota.FakeClock) -> rota.App:
    app: rota.App = app_factory(clock=fake)
    app.task(name="t")(lambda: None)
    return app


def test_runs_made_ahead_are_judged_beside_a_schedule_whose_grace_is_damaged(
    fapp: rota.App, fake: rota.FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    fapp.add_schedule("bad", "t", every=60)
    fapp.add_schedule("good", "t", every=60)
    fake.set(minute(1) - timedelta(seconds=0.2))
    tick_pass(fapp)  # both next ticks made ahead, with a misfire deadline
    assert [r.status for r in runs_of(fapp, "bad") + runs_of(fapp, "good")] == ["pending", "pending"]
    _sql(fapp, f"UPDATE rota_schedules SET misfire_grace = {_value(fapp, 'infinity')} WHERE name = 'bad'")
    caplog.set_level(logging.WARNING, logger="rota")
    fake.set(minute(3))  # both unclaimed past their deadline: judged by the misfire policy
    judged = fapp.store.judge_ahead()
    assert sorted(name for name, _, _ in judged) == ["bad", "good"]
    assert _named(caplog, "schedule") == {"bad": 1}


@pytest.mark.parametrize("run_immediately", [False, True])
def test_a_worker_start_rewrites_a_damaged_code_schedule_from_the_code(app_factory: Any, run_immediately: bool) -> None:
    app = app_factory()

    @app.schedule(every=60, name="from-code", run_immediately=run_immediately)
    def job() -> None: ...

    app.prepare()
    _sql(app, f"UPDATE rota_schedules SET every = {_value(app, 'infinity')} WHERE name = 'from-code'")
    assert app.get_schedule("from-code").damage is not None
    app.prepare()  # what a worker does at start
    repaired = app.get_schedule("from-code")
    assert repaired.damage is None and repaired.every == timedelta(seconds=60) and repaired.next_run_at is not None


def test_a_backfill_of_a_damaged_schedule_is_one_line(app: rota.App) -> None:
    app.task(name="t")(lambda: None)
    app.add_schedule("s", "t", every=3600)
    _sql(app, f"UPDATE rota_schedules SET every = {_value(app, 'infinity')} WHERE name = 's'")
    result = CliRunner().invoke(
        main, ["--database-url", app.database_url, "backfill", "s", "--from", "2030-01-01", "--to", "2030-01-02"]
    )
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and "schedule 's' is damaged (every=" in result.output, result.output


def test_the_api_refuses_to_trigger_or_resume_a_damaged_schedule_with_409(app: rota.App) -> None:
    app.task(name="t")(lambda: None)
    app.add_schedule("s", "t", every=3600)
    app.pause("s")
    _sql(app, "UPDATE rota_schedules SET misfire_grace = -5 WHERE name = 's'")
    with TestClient(create_app(app), base_url="http://127.0.0.1") as client:
        for action in ("trigger", "resume"):
            answer = client.post(f"/api/schedules/s/{action}", headers={"Origin": "http://127.0.0.1"})
            assert answer.status_code == 409, answer.text
            assert "schedule 's' is damaged (misfire_grace=-5" in answer.json()["error"], answer.json()


def test_worker_processes_start_and_fire_beside_every_kind_of_damaged_row(app: rota.App, procs: WorkerProcs) -> None:
    """Two `rota worker` processes (tests.apps.basic, which declares neither "t" nor "lim")
    beside damaged schedules, a damaged task spec and damaged registry rows."""
    app.task(name="t")(lambda: None)
    bad = _damage_schedules(app)
    app.add_schedule("limited", "lim", every=1, run_immediately=True)
    _spec(app, "lim", '{"limit": {"name": "x", "by": [{"name": 1}]}}')
    _damage_registry(app)
    app.add_schedule("good", "noop", every=1, args=[1], run_immediately=True)
    for _ in range(2):
        procs.start()
    wait_until(lambda: len(app.list_runs(schedule="good", status="succeeded")) >= 4, 60, "the good schedule to fire")
    assert len(procs.alive()) == 2
    assert all(app.get_schedule(name).plan_error for name in bad)
    for output in procs.outputs():
        assert "Traceback" not in output and "role failed" not in output, output[-3000:]
        for name in bad:
            assert output.count(f"damaged schedule {name!r} set aside") == 1, (name, output[-3000:])
    named = [output.count("damaged task spec 'lim' set aside") for output in procs.outputs()]
    assert max(named) == 1 and sum(named) >= 1, named
