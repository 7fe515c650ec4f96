"""A damaged run row (issue 41 items 5, 6, 9, 10): a value no release writes, put there by hand
or by a hostile peer, in one run of a claimed batch. The worker claims the batch, sets the bad
run aside (failed with error type DamagedRow, named once by a `row_damaged` warning, never
retried) and runs the others, whose leases its heartbeats keep; `rota runs --damaged` and
/api/runs?damaged=1 list it. On both stores, with a real worker."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
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


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


GOOD = 5
SLEEP = 1.5  # longer than the lease: a good run succeeds only if its heartbeats renew it
LEASE = 1.0


def _pg(app: rota.App) -> bool:
    return bool(app.store.dialect == "postgresql")  # type: ignore[attr-defined]


def _damage(app: rota.App, run_id: str, column: str, value: str) -> None:
    """Write `value` (SQL) into one run's column through the store's own transaction (on
    MySQL/MariaDB as a hand edit would, without strict mode: mysql_db.execute)."""
    store: Any = app.store
    if store.dialect == "mysql":
        mysql_db.execute(app.database_url, f"UPDATE rota_runs SET {column} = {value} WHERE id = {int(run_id)}")
        return
    with store._tx() as s:
        s.q_text(f"UPDATE rota_runs SET {column} = {value} WHERE id = {store._p('id')}", id=int(run_id))


@pytest.fixture(autouse=True)
def _fresh_names() -> None:
    quarantine.forget()  # each test's worker names its damaged run anew


def _batch(
    app: rota.App, column: str, value: str, *, fails: bool = False, **enqueue: Any
) -> tuple[Any, list[Any], list[int]]:
    """GOOD runs that sleep past the lease and one damaged run, claimed together."""
    ran: list[int] = []
    lock = threading.Lock()

    def work(n: int) -> int:
        with lock:
            ran.append(n)
        time.sleep(0 if n < 0 else SLEEP)
        if fails:
            raise RuntimeError(f"run {n} failed")
        return n

    t = app.task(name="t", retries=2, backoff=0.01)(work)
    call = t.options(**enqueue)
    bad = call.enqueue(-1)  # first in claim order
    good = [call.enqueue(i) for i in range(GOOD)]
    _damage(app, bad.id, column, value)
    return bad, good, ran


def _assert_set_aside(caplog: pytest.LogCaptureFixture, bad: Any, good: list[Any], in_reason: str) -> rota.Run:
    run = bad.wait(timeout=30)
    assert run.status == "failed", run
    assert run.error is not None and run.error["type"] == "DamagedRow", run.error
    assert in_reason in run.error["message"]
    for g in good:
        assert g.wait(timeout=30).status == "succeeded"
    named = [r for r in caplog.records if getattr(r, "event", None) == quarantine.EVENT]
    assert len(named) == 1, [r.getMessage() for r in named]
    assert f"damaged run '{bad.id}' set aside" in named[0].getMessage() and in_reason in named[0].getMessage()
    return run


def _attempt_max(app: rota.App) -> str:
    return "9223372036854775807" if app.store.dialect == "sqlite" else "2147483647"  # type: ignore[attr-defined]


@pytest.mark.parametrize("ahead", [False, True], ids=["due", "claimed-ahead"])
def test_a_run_at_the_attempt_maximum_is_set_aside_and_the_batch_runs(
    app_factory: Any, caplog: pytest.LogCaptureFixture, ahead: bool
) -> None:
    """Item 5: the claim added 1 to every attempt of the batch; one at the column's maximum
    failed the whole statement, on every worker, forever."""
    app = app_factory(lease=LEASE)
    caplog.set_level(logging.WARNING, logger="rota")
    bad, good, ran = _batch(app, "attempt", _attempt_max(app), delay=0.5 if ahead else 0.0)
    start_worker(app, concurrency=GOOD + 1)
    run = _assert_set_aside(caplog, bad, good, "attempt")
    assert -1 not in ran and sorted(ran) == list(range(GOOD))
    assert str(run.attempt) == _attempt_max(app)  # left as found, for the operator to see


def test_a_limited_run_at_the_attempt_maximum_is_set_aside(app_factory: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Item 5, the flow claim (runs of a limit): the same guard."""
    app = app_factory(lease=LEASE)
    caplog.set_level(logging.WARNING, logger="rota")
    t = app.task(name="lim", limit=rota.Limit(10, by=lambda n: "k"))(lambda n: n)
    bad = t.enqueue(-1)
    good = [t.enqueue(i) for i in range(3)]
    _damage(app, bad.id, "attempt", _attempt_max(app))
    start_worker(app, concurrency=GOOD)
    _assert_set_aside(caplog, bad, good, "attempt")


def _bad_timeouts() -> list[Any]:
    pg = pytest.mark.postgres
    return [
        pytest.param("'NaN'", "postgresql", marks=pg, id="nan"),
        pytest.param("'Infinity'", "postgresql", marks=pg, id="pg-infinity"),
        pytest.param("9e999", "sqlite", id="sqlite-infinity"),
        pytest.param("-1", None, id="negative"),
        pytest.param("0", None, id="zero"),
    ]


@pytest.mark.parametrize(("value", "store"), _bad_timeouts())
def test_a_run_with_an_impossible_timeout_is_set_aside_and_the_others_keep_their_leases(
    app_factory: Any, caplog: pytest.LogCaptureFixture, value: str, store: str | None
) -> None:
    """Item 6: a NaN timeout's timer broke the event loop's timer heap: heartbeats stopped,
    the other runs were rescued as lost and their outcomes (successes) discarded."""
    app = app_factory(lease=LEASE)
    if store is not None and app.store.dialect != store:  # type: ignore[attr-defined]
        pytest.skip(f"{value} is stored only by {store}")
    caplog.set_level(logging.WARNING, logger="rota")
    bad, good, ran = _batch(app, "timeout", value)
    start_worker(app, concurrency=GOOD + 1)
    _assert_set_aside(caplog, bad, good, "timeout")
    assert -1 not in ran
    for g in good:  # succeeded in their first attempt: never rescued as lost
        run = app.get_run(g.id)
        assert run.attempt == 1 and [a["status"] for a in run.attempts] in ([], ["succeeded"]), run


@pytest.mark.parametrize("kind", ["thread", "child-process", "async"])
def test_a_huge_timeout_is_no_limit(app_factory: Any, kind: str) -> None:
    """Item 6: a finite timeout longer than any timer can wait (1e300 s; enqueue accepts it)
    runs as no limit, with its context (a regression guard: this already held)."""
    app = app_factory(lease=LEASE)
    handler = _async_noop if kind == "async" else _noop
    t = app.task(name="t", isolation="process" if kind == "child-process" else "none", pass_context=True)(handler)
    run = t.enqueue()
    _damage(app, run.id, "timeout", "1e300")
    start_worker(app)
    assert run.wait(timeout=30).status == "succeeded"


def _noop(ctx: rota.RunContext) -> int:
    return 7 + 0 * ctx.attempt


async def _async_noop(ctx: rota.RunContext) -> int:
    return 7 + 0 * ctx.attempt


def _bad_times() -> list[Any]:
    pg, my = pytest.mark.postgres, pytest.mark.mysql
    return [
        pytest.param("scheduled_for", "1e300", "sqlite", id="sqlite-scheduled_for-1e300"),
        pytest.param("scheduled_for", "-1e300", "sqlite", id="sqlite-scheduled_for-before-year-1"),
        pytest.param("due_at", "-9e999", "sqlite", id="sqlite-due_at-minus-infinity"),
        pytest.param("scheduled_for", "'infinity'", "postgresql", marks=pg, id="pg-scheduled_for-infinity"),
        pytest.param("scheduled_for", "now() + interval '100000 years'", "postgresql", marks=pg, id="pg-year-102026"),
        pytest.param("due_at", "'-infinity'", "postgresql", marks=pg, id="pg-due_at-minus-infinity"),
        pytest.param("scheduled_for", mysql_db.ZERO_DATE, "mysql", marks=my, id="mysql-scheduled_for-zero-date"),
        pytest.param("due_at", mysql_db.ZERO_DATE, "mysql", marks=my, id="mysql-due_at-zero-date"),
    ]


@pytest.mark.parametrize(("column", "value", "store"), _bad_times())
def test_one_run_with_a_time_out_of_range_does_not_lose_its_batch(
    app_factory: Any, caplog: pytest.LogCaptureFixture, column: str, value: str, store: str
) -> None:
    """Item 9: decoding the bad row raised after the batch's claim committed: every other run
    of the batch ended 'failed: worker was lost' without running, for every batch it joined."""
    app = app_factory(lease=LEASE)
    if app.store.dialect != store:  # type: ignore[attr-defined]
        pytest.skip(f"{value} is written only on {store}")
    caplog.set_level(logging.WARNING, logger="rota")
    bad, good, ran = _batch(app, column, value)
    start_worker(app, concurrency=GOOD + 1)
    _assert_set_aside(caplog, bad, good, column)
    assert -1 not in ran and sorted(ran) == list(range(GOOD))


@pytest.mark.parametrize("value", ["'[1'", "'{\"base\": 1e300}'", "'{\"nope\": 1}'", "'[]'"])
def test_a_damaged_backoff_decides_the_attempt(app_factory: Any, caplog: pytest.LogCaptureFixture, value: str) -> None:
    """Item 10: the retry's backoff did not decode: an asyncio traceback, the attempt never
    decided ('worker was lost' at the lease's end) and the handler run again once per lease."""
    app = app_factory(lease=LEASE)
    caplog.set_level(logging.WARNING, logger="rota")
    calls: list[int] = []

    def fail(n: int) -> None:
        calls.append(n)
        raise RuntimeError("boom")

    t = app.task(name="f", retries=3, backoff=0.01)(fail)
    good = t.enqueue(1)
    bad = t.enqueue(2)
    _damage(app, bad.id, "backoff", value)
    start_worker(app)
    run = bad.wait(timeout=30)
    assert run.status == "failed" and run.attempt == 1, run
    assert run.error is not None and run.error["type"] == "DamagedRow" and "backoff" in run.error["message"]
    assert "the attempt failed with RuntimeError: boom" in run.error["message"]  # its own error is kept
    assert good.wait(timeout=30).status == "failed" and app.get_run(good.id).attempt == 4
    time.sleep(2 * LEASE)  # a lease's end did not run it again
    assert calls.count(2) == 1
    named = [r for r in caplog.records if getattr(r, "event", None) == quarantine.EVENT]
    assert len(named) == 1 and f"damaged run '{bad.id}'" in named[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info], "no traceback"


@pytest.mark.parametrize(
    ("column", "value", "words"),
    [
        ("args", "'[1,'", "not valid JSON"),
        ("args", "'{\"a\": 1}'", "not a JSON array and a JSON object"),  # was called with t("a")
        ("kwargs", "'[1]'", "not a JSON array and a JSON object"),  # was a TypeError, retried
    ],
)
def test_corrupt_arguments_end_as_damaged_rows(
    app: rota.App, caplog: pytest.LogCaptureFixture, column: str, value: str, words: str
) -> None:
    """The older path (arguments that are not JSON) ends the same way: DamagedRow, one warning,
    never retried; so do arguments that are JSON but not an array and an object."""
    caplog.set_level(logging.WARNING, logger="rota")
    calls: list[Any] = []
    t = app.task(name="t", retries=3)(lambda *a, **k: calls.append(a))
    bad = t.enqueue(1)
    _damage(app, bad.id, column, value)
    start_worker(app)
    run = bad.wait(timeout=30)
    assert run.status == "failed" and run.error is not None and run.error["type"] == "DamagedRow", run.error
    assert f"stored arguments are {words}" in run.error["message"] and run.attempt == 1
    assert calls == []
    named = [r for r in caplog.records if getattr(r, "event", None) == quarantine.EVENT]
    assert len(named) == 1 and f"damaged run '{bad.id}'" in named[0].getMessage()


def test_damaged_runs_are_listed_by_the_cli_and_the_api(app: rota.App) -> None:
    t = app.task(name="t")(lambda: None)
    bad, plain = t.enqueue(), t.enqueue()
    failing = app.task(name="f")(lambda: 1 / 0).enqueue()
    _damage(app, bad.id, "attempt", _attempt_max(app))
    start_worker(app)
    wait_for(lambda: all(app.get_run(r.id).is_final for r in (bad, plain, failing)), what="the runs to end")
    assert [r.id for r in app.list_runs(damaged=True)] == [bad.id]
    assert app.list_runs(status="failed", damaged=True)[0].id == bad.id
    assert app.list_runs(status="succeeded", damaged=True) == []

    url = app.database_url
    listed = CliRunner().invoke(main, ["--database-url", url, "runs", "--damaged", "--json"])
    assert listed.exit_code == 0, listed.output
    assert [r["id"] for r in json.loads(listed.output)] == [bad.id]
    table = CliRunner(env={"COLUMNS": "200"}).invoke(main, ["--database-url", url, "runs", "--damaged"])
    assert table.exit_code == 0 and "DamagedRow: damaged row: attempt" in table.output, table.output
    shown = CliRunner().invoke(main, ["--database-url", url, "run", bad.id])
    assert shown.exit_code == 0 and "DamagedRow: damaged row: attempt" in shown.output, shown.output

    with TestClient(create_app(app), base_url="http://127.0.0.1") as client:
        api = client.get("/api/runs", params={"damaged": "1"})
        assert api.status_code == 200 and [r["id"] for r in api.json()] == [bad.id]
        assert len(client.get("/api/runs", params={"damaged": "0"}).json()) == 3
        assert client.get("/api/runs", params={"damaged": "maybe"}).status_code == 400


def test_a_history_that_is_not_json_stops_no_rescue_and_no_retry(app_factory: Any) -> None:
    """SQLite: appending to a run's stored history (json_insert) failed on text that is not
    JSON, and with it the whole statement: a rescue sweep with such a run in its batch failed
    on every worker at every poll (no lost run was ever rescued), and a retry's outcome could
    not be stored. PostgreSQL's jsonb column holds only JSON."""
    app = app_factory(lease=LEASE)
    if _pg(app):
        pytest.skip("jsonb holds only JSON")
    calls: list[int] = []

    def flaky(n: int) -> int:
        calls.append(n)
        if calls.count(n) == 1 and n == 3:
            raise RuntimeError("once")
        return n

    t = app.task(name="t", retries=2, backoff=0.01)(flaky)
    lost = [t.enqueue(n) for n in (1, 2)]
    retried = t.enqueue(3)
    store: Any = app.store
    if store.dialect == "mysql":  # LONGTEXT, as SQLite's TEXT: it holds what is not JSON
        ago = "UTC_TIMESTAMP(6) - INTERVAL {} SECOND"
        mysql_db.execute(
            app.database_url,
            f"UPDATE rota_runs SET status = 'running', owner = 'ghost', token = 1, attempt = 1, "
            f"started_at = {ago.format(60)}, lease_until = {ago.format(30)} WHERE id IN ({lost[0].id}, {lost[1].id})",
        )
    else:
        with store._tx() as s:  # two runs of a worker that died: one of them with a damaged history
            s.q_text(
                "UPDATE rota_runs SET status = 'running', owner = 'ghost', token = 1, attempt = 1, "
                "started_at = unixepoch() - 60, lease_until = unixepoch() - 30 WHERE id IN (:a, :b)",
                a=int(lost[0].id),
                b=int(lost[1].id),
            )
    for run in (lost[0], retried):
        _damage(app, run.id, "attempts", "'[{\"attempt\": 1,'")
    start_worker(app)
    for run in (*lost, retried):
        assert run.wait(timeout=30).status == "succeeded", app.get_run(run.id)
    assert app.get_run(lost[0].id).attempt == 2 and app.get_run(retried.id).attempt == 2
