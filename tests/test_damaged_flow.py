"""One damaged flow-control row never stops the others (issue 41, deliver item 2), on both
stores, with a real worker: a limit or a rate whose stored size or window is out of range, a
start logged in the future, a task's stored spec that is not JSON, a run the rescue cannot
describe, a schedule's counter at its column's maximum, a stray run already in the history.
The damaged row is set aside (its runs wait: fail closed, for that pool only), named once
in the log (event row_damaged) and listed; the other runs, rescues and sweeps go on."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

import rota
from rota import quarantine
from rota.cli import main
from rota.limit_specs import UNRESOLVED
from rota.web import create_app
from rota.worker import maintenance

from .conftest import WITH_MYSQL, start_worker, store_url, wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


# a value no API writes, per store: (PostgreSQL, SQLite); None where the store cannot hold it
PER = {"huge": ("1e300", "1e300"), "infinite": ("'Infinity'::float8", "9e999"), "nan": ("'NaN'::float8", None)}
MYSQL_PER = {"huge": "1e300", "infinite": "1e308", "nan": None}  # DOUBLE holds no NaN or Infinity


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    quarantine.forget()
    monkeypatch.setattr(maintenance, "FLOW_CHECK_SECONDS", 0.2)
    caplog.set_level(logging.WARNING, logger="rota")
    yield
    quarantine.forget()


def _sql(app: rota.App, sql: str, **params: Any) -> list[Any]:
    """A statement no API would send (`:name` parameters, written for the store's style)."""
    store: Any = app.store
    for name in params:
        sql = sql.replace(f":{name}", store._p(name))
    with store._tx() as s:
        return list(s.q_text(sql, **params))


def _pg(app: rota.App) -> bool:
    return bool(app.store.dialect == "postgresql")


def _key(app: rota.App) -> str:
    """The column `key`, quoted where it is a reserved word (MySQL)."""
    return "`key`" if app.store.dialect == "mysql" else "key"


def _sqlite(app: rota.App) -> bool:
    """SQLite keeps times as numbers and run counts in a table; the servers do neither."""
    return bool(app.store.dialect == "sqlite")


def _damage_named(caplog: pytest.LogCaptureFixture, key: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if getattr(r, "event", None) == quarantine.EVENT and (getattr(r, "fields", None) or {}).get("key") == key
    ]


def _status(app: rota.App, run_id: Any) -> str:
    return str(app.get_run(run_id).status)


def _running(app: rota.App, **options: Any) -> rota.Worker:
    worker = start_worker(app, **options)
    wait_for(lambda: worker.state == "running", what="the worker to start (its limits and rates stored)")
    return worker


def _flow_app(app_factory: Callable[..., rota.App], **options: Any) -> rota.App:
    app = app_factory(**options)

    @app.task(rate=rota.Rate(5, per=60, name="bad"), limit=rota.Limit(5, name="capped"), name="bad")
    def bad() -> None: ...

    @app.task(rate=rota.Rate(5, per=60, name="good"), limit=rota.Limit(5, by="n", name="pool"), name="good")
    def good(n: int) -> None: ...

    @app.task(name="plain")
    def plain() -> None: ...

    return app


def _listed(app: rota.App) -> dict[str, Any]:
    result = CliRunner(env={"COLUMNS": "200"}).invoke(main, ["--database-url", app.database_url, "limits", "--json"])
    assert result.exit_code == 0, result.output
    table = CliRunner(env={"COLUMNS": "200"}).invoke(main, ["--database-url", app.database_url, "limits"])
    assert table.exit_code == 0, table.output
    with TestClient(create_app(app), base_url="http://127.0.0.1") as client:
        api = client.get("/api/limits")
        assert api.status_code == 200, api.text
    data: dict[str, Any] = json.loads(result.output)
    assert api.json()["limits"] == data["limits"] and api.json()["rates"] == data["rates"]
    data["table"] = table.output
    return data


@pytest.mark.parametrize("how", sorted(PER))
def test_a_rate_with_a_damaged_window_holds_its_own_runs_and_the_rest_run(
    app_factory: Callable[..., rota.App], caplog: pytest.LogCaptureFixture, how: str
) -> None:
    app = _flow_app(app_factory)
    value = MYSQL_PER[how] if app.store.dialect == "mysql" else PER[how][0 if _pg(app) else 1]
    if value is None:
        pytest.skip("SQLite stores NaN as NULL, which the column refuses; MySQL's DOUBLE holds no NaN")
    _running(app)
    _sql(app, f"UPDATE rota_rates SET per = {value} WHERE name = 'bad'")
    held = app.tasks["bad"].enqueue()
    others = [app.tasks["good"].enqueue(n) for n in range(3)] + [app.tasks["plain"].enqueue()]
    wait_for(lambda: all(_status(app, h.id) == "succeeded" for h in others), what="the other runs to succeed")
    wait_for(lambda: bool(_damage_named(caplog, "bad")), what="the damaged rate to be named")
    assert _status(app, held.id) == "pending"  # fail closed: never started past a window it cannot read
    rates = {r["name"]: r for r in _listed(app)["rates"]}
    assert rates["bad"]["corrupt"] == ["per"] and rates["good"]["corrupt"] == []
    assert rates["good"]["started_in_window"] == 3
    assert _damage_named(caplog, "bad") == [_damage_named(caplog, "bad")[0]]  # once, however many checks
    assert "rate 'bad' set aside" in _damage_named(caplog, "bad")[0]
    _sql(app, "UPDATE rota_rates SET per = 60 WHERE name = 'bad'")  # the repair: its run goes
    wait_for(lambda: _status(app, held.id) == "succeeded", what="the repaired rate's run")


def test_a_limit_with_a_damaged_size_holds_its_own_runs_and_the_rest_run(
    app_factory: Callable[..., rota.App], caplog: pytest.LogCaptureFixture
) -> None:
    app = _flow_app(app_factory)
    _running(app)
    huge = 9223372036854775807 if _sqlite(app) else 2147483647
    _sql(app, "UPDATE rota_limits SET max = :max WHERE name = 'capped'", max=huge)
    held = app.tasks["bad"].enqueue()
    others = [app.tasks["good"].enqueue(n) for n in range(3)] + [app.tasks["plain"].enqueue()]
    wait_for(lambda: all(_status(app, h.id) == "succeeded" for h in others), what="the other runs to succeed")
    wait_for(lambda: bool(_damage_named(caplog, "capped")), what="the damaged limit to be named")
    assert _status(app, held.id) == "pending"  # a size no Limit can declare: no slot
    data = _listed(app)
    assert {i["name"]: i["corrupt"] for i in data["limits"]} == {"capped": ["max"], "pool": []}
    assert "capped (corrupt: max; its runs wait)" in data["table"]
    assert f"stored max {huge}" in _damage_named(caplog, "capped")[0]


def test_a_start_logged_in_the_future_is_not_counted_and_goes(app_factory: Callable[..., rota.App]) -> None:
    app = _flow_app(app_factory)
    _running(app)
    future = "'infinity'::timestamptz" if _pg(app) else "1e300" if _sqlite(app) else "'9999-12-31 23:59:59'"
    for _ in range(5):  # the whole window of 'good', key '', claimed "forever"
        _sql(app, f"INSERT INTO rota_rate_starts (name, {_key(app)}, started_at) VALUES ('good', '', {future})")
    runs = [app.tasks["good"].enqueue(n) for n in range(3)]
    wait_for(lambda: all(_status(app, h.id) == "succeeded" for h in runs), what="the runs of the rate")
    wait_for(lambda: not _sql(app, "SELECT 1 FROM rota_rate_starts WHERE started_at > :t", t=_far(app)), what="pruned")
    assert {r.name: r.started for r in app.store.list_rates()}["good"] == 3  # type: ignore[attr-defined]


def _far(app: rota.App) -> Any:
    return 1e12 if _sqlite(app) else datetime(9000, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("spec", ["not json", "[]", '{"limit": {"by": null}}', '{"limit": "x"}'])
def test_a_task_spec_that_does_not_decode_leaves_runs_made_elsewhere_unresolved(
    app_factory: Callable[..., rota.App], caplog: pytest.LogCaptureFixture, spec: str
) -> None:
    app = _flow_app(app_factory)
    client = app_factory()  # declares nothing, as `rota trigger` and `rota retry`
    client.add_schedule("nightly", "good", every=3600, args=[7], overlap="concurrent")
    app.migrate()
    app.prepare()
    _sql(app, "UPDATE rota_task_flow SET spec = :spec WHERE task = 'good'", spec=spec)
    made = client.trigger("nightly")  # before: a ValueError or KeyError traceback
    with app.store._read() as s:  # type: ignore[attr-defined]
        (gate,) = s.q_text(f"SELECT limit_name FROM rota_runs WHERE id = {int(made.id)}")
    assert gate[0] == UNRESOLVED  # waits for a worker that declares the task: never unlimited
    assert len(_damage_named(caplog, "good")) == 1
    (listed,) = _listed(app)["damaged_specs"]
    assert listed["task"] == "good" and "its stored limit/rate spec cannot be used" in listed["reason"]
    _running(app)  # declares it: keys it from its code, and stores its spec again
    wait_for(lambda: _status(client, made.id) == "succeeded", what="the declaring worker to run it")


def test_the_rescue_survives_a_lost_run_it_cannot_describe(app_factory: Callable[..., rota.App]) -> None:
    app = app_factory(lease=1.0)

    @app.task(name="t", retries=2)
    def t(n: int) -> None: ...

    damaged, lost = t.enqueue(1), t.enqueue(2)
    # two runs held by a worker that died, due before their lease ran out: one with an attempt
    # at its column's maximum (PostgreSQL: the rescue's attempt + 1 overflowed) or a history
    # that is not JSON (SQLite: json_insert refused it), its cancellation requested (so that
    # nothing claims it again)
    held = "status = 'running', owner = 'gone', token = 1, started_at = NULL, lease_until = :past, due_at = :due"
    now = datetime.now(UTC)
    past, due = (now - timedelta(seconds=60), now - timedelta(seconds=70))
    if _sqlite(app):
        past, due = past.timestamp(), due.timestamp()  # type: ignore[assignment]
    broken = "attempts = 'not json'" if _sqlite(app) else "attempt = 2147483647"
    for run, damage in ((damaged, f", {broken}, cancel_requested = true"), (lost, "")):
        _sql(app, f"UPDATE rota_runs SET {held}{damage} WHERE id = :id", past=past, due=due, id=int(run.id))
    _running(app)
    wait_for(lambda: _status(app, lost.id) == "succeeded", what="the other lost run to be rescued and run")
    wait_for(lambda: _status(app, damaged.id) == "cancelled", what="the damaged run's rescue")


def test_a_schedule_counter_at_its_maximum_never_fails_a_finish(app_factory: Callable[..., rota.App]) -> None:
    app = app_factory()

    @app.task(name="t")
    def t() -> None: ...

    app.add_schedule("full", "t", every=1, run_immediately=True)
    app.migrate()
    top = 9223372036854775807
    _sql(app, f"UPDATE rota_schedules SET run_count = {top}, success_count = {top}, skip_count = {top}")
    if _sqlite(app):  # SQLite's run counts too
        _sql(app, f"UPDATE rota_run_counts SET n = {top} WHERE status IN ('pending', 'running', 'succeeded')")
    plain = t.enqueue()
    _running(app)
    wait_for(lambda: _status(app, plain.id) == "succeeded", what="a plain run to succeed")
    wait_for(lambda: len(app.list_runs(schedule="full", status="succeeded")) >= 2, what="the schedule to run twice")
    info = app.get_schedule("full")
    assert info.run_count == top and info.success_count == top  # saturated, not wrapped or failed


def test_the_history_sweep_moves_the_rest_past_a_run_already_there(
    app_factory: Callable[..., rota.App], caplog: pytest.LogCaptureFixture
) -> None:
    app = app_factory()
    if not _pg(app):
        pytest.skip("the history table is PostgreSQL's")

    @app.task(name="t")
    def t(n: int) -> None: ...

    first, second = t.enqueue(1), t.enqueue(2)
    worker = _running(app)
    wait_for(lambda: _status(app, second.id) == "succeeded", what="the runs to succeed (moved to the history)")
    worker.stop(wait=True, timeout=10)
    # a bad restore: the first run back among the active ones, and a stray success to move
    _sql(app, "INSERT INTO rota_runs SELECT * FROM rota_history WHERE id = :id", id=int(first.id))
    stray = t.enqueue(3)
    _sql(app, "UPDATE rota_runs SET status = 'succeeded', finished_at = now() WHERE id = :id", id=int(stray.id))
    assert app.store.move_history(100) == 1  # type: ignore[attr-defined]  # before: a unique violation, forever
    assert _sql(app, "SELECT id FROM rota_runs WHERE status = 'succeeded'") == [(int(first.id),)]
    assert _status(app, stray.id) == "succeeded" and _status(app, first.id) == "succeeded"
    assert app.store.move_history(100) == 0  # type: ignore[attr-defined]
    assert len(_damage_named(caplog, str(first.id))) == 1  # named once, however many sweeps


def test_a_run_waiting_on_a_parent_deleted_by_hand_is_set_aside(
    app_factory: Callable[..., rota.App], caplog: pytest.LogCaptureFixture
) -> None:
    app = app_factory()

    @app.task(name="t")
    def t(n: int) -> None: ...

    gone, later = t.enqueue(1), t.options(delay=3600).enqueue(2)
    orphan = t.options(after=[gone]).enqueue(3)
    grandchild = t.options(after=[orphan]).enqueue(4)
    waiting = t.options(after=[later]).enqueue(5)  # its parent is pending: it goes on waiting
    _sql(app, "DELETE FROM rota_runs WHERE id = :id", id=int(gone.id))  # by hand, while it was due
    plain = t.enqueue(6)
    _running(app)
    wait_for(lambda: _status(app, plain.id) == "succeeded", what="the other runs to go on")
    wait_for(lambda: _status(app, orphan.id) == "failed", what="the orphan to be set aside")
    run = app.get_run(orphan.id)
    assert run.error is not None and run.error["type"] == quarantine.ERROR_TYPE
    assert "parents none of which is pending or running" in run.error["message"]
    assert _status(app, grandchild.id) == "cancelled"  # as after any failed parent
    assert _status(app, waiting.id) == "pending" and _status(app, later.id) == "pending"
    assert len(_damage_named(caplog, str(orphan.id))) == 1


def test_pruning_survives_a_run_count_at_its_minimum(app_factory: Callable[..., rota.App]) -> None:
    app = app_factory(retention={"failed": timedelta(seconds=0.2)}, prune_interval=0.2)
    if not _sqlite(app):
        pytest.skip("PostgreSQL and MySQL keep no run counts (their statistics estimate them)")

    @app.task(name="boom")
    def boom(n: int) -> None:
        raise RuntimeError("no")

    runs = [boom.enqueue(n) for n in range(3)]
    worker = _running(app)
    wait_for(lambda: all(_status(app, r.id) == "failed" for r in runs), what="the runs to fail")
    worker.stop(wait=True, timeout=10)
    # the count of failed runs at INTEGER's minimum: each deletion's n - 1 was a REAL the STRICT
    # table refused, and the prune statement failed with it, at every pass
    _sql(app, "UPDATE rota_run_counts SET n = -9223372036854775807 - 1 WHERE status = 'failed'")
    _running(app)
    wait_for(lambda: app.list_runs(status="failed") == [], what="the failed runs to be pruned")


def test_a_uniqueness_record_made_in_the_future_frees_its_key(app_factory: Callable[..., rota.App]) -> None:
    app = app_factory()

    @app.task(name="t")
    def t(n: int) -> None: ...

    first = t.options(key="k", unique_for=0.2).enqueue(1)
    other = t.options(key="other", unique_for=3600).enqueue(2)
    _sql(app, "UPDATE rota_runs SET status = 'succeeded', finished_at = created_at")  # ended, as a worker would
    # the key's record made "in year 3000": it held the key (returned the first run) forever
    year_3000 = datetime(3000, 1, 1, tzinfo=UTC)
    _sql(
        app,
        f"UPDATE rota_unique SET created_at = :t WHERE {_key(app)} = 'k'",
        t=32503680000.0 if _sqlite(app) else year_3000,
    )
    time.sleep(0.3)  # past the window
    again = t.options(key="k", unique_for=0.2).enqueue(3)
    assert again.id != first.id and _status(app, again.id) == "pending"
    assert t.options(key="other", unique_for=3600).enqueue(4).id == other.id  # a sound record still holds its key


@pytest.mark.parametrize("column", ["limit_key", "rate_key"])
def test_a_run_with_a_pool_and_no_key_is_set_aside_and_the_pool_goes_on(
    app_factory: Callable[..., rota.App], caplog: pytest.LogCaptureFixture, column: str
) -> None:
    app = _flow_app(app_factory)
    keyless = app.tasks["good"].enqueue(0)
    _sql(app, f"UPDATE rota_runs SET {column} = NULL WHERE id = :id", id=int(keyless.id))  # by hand
    others = [app.tasks["good"].enqueue(n) for n in range(1, 4)]
    _running(app)
    # SQLite's walk over a pool's keys started at the NULL key (NULLs sort first) and skipped
    # every other key of the pool: none of them ran
    wait_for(lambda: all(_status(app, h.id) == "succeeded" for h in others), what="the pool's other keys")
    wait_for(lambda: _status(app, keyless.id) == "failed", what="the keyless run to be set aside")
    run = app.get_run(keyless.id)
    assert run.error is not None and run.error["type"] == quarantine.ERROR_TYPE
    assert len(_damage_named(caplog, str(keyless.id))) == 1
