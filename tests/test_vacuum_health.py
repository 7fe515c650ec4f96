"""What holds back PostgreSQL's cleanup of rota's tables, in `/metrics` and `rota status`
(PostgreSQL only; absent on SQLite), and the one-line warning at worker start when
autovacuum is off (the shared test server has it off)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

import rota
from rota.stores.postgres import vacuum as _pg_vacuum
from rota.web import create_app

from .conftest import make_app, start_worker, wait_for
from .test_cli_status import cli


def metric_samples(app: rota.App) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with TestClient(create_app(app), base_url="http://127.0.0.1") as client:
        text = client.get("/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.postgres
def test_metrics_and_status_show_the_oldest_xmin_and_dead_tuples(pg_url: str) -> None:
    app = make_app(pg_url)
    app.migrate()
    with psycopg.connect(pg_url) as holder:  # a session idle in a transaction, holding a snapshot
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT 1")
        time.sleep(1.2)
        samples = metric_samples(app)
        assert samples[("rota_db_oldest_xmin_age_seconds", ())] >= 1.0
        assert samples[("rota_db_oldest_xmin_age_xids", ())] >= 0
        assert ("rota_db_dead_tuples", (("table", "rota_runs"),)) in samples
        assert ("rota_db_autovacuum", ()) in samples
        code, out = cli(pg_url, "status")
        assert code == 0, out
        (line,) = [line for line in out.splitlines() if line.startswith("vacuum:")]
        assert "oldest transaction holding back cleanup" in line and "dead rows:" in line, line
        code, out = cli(pg_url, "status", "--json")
        vacuum = json.loads(out)["vacuum"]
        assert vacuum["oldest_xmin_age_seconds"] >= 1.0 and "rota_runs" in vacuum["dead_tuples"]
    app.close()


def test_sqlite_has_no_vacuum_figures(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/rota.db"
    app = make_app(url)
    app.migrate()
    assert not [name for name, _ in metric_samples(app) if name.startswith("rota_db_")]
    code, out = cli(url, "status")
    assert code == 0 and "vacuum:" not in out, out
    code, out = cli(url, "status", "--json")
    assert "vacuum" not in json.loads(out)
    app.close()


@pytest.mark.postgres
def test_a_worker_warns_once_when_autovacuum_is_off(
    pg_url: str,
    app_factory: Callable[..., rota.App],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_pg_vacuum, "_WARNED", set())
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SHOW autovacuum").fetchone()
    off = row is not None and row[0] == "off"
    app = app_factory(url=pg_url)
    app.task(name="t")(lambda: None)
    first = start_worker(app)
    second = start_worker(app)
    wait_for(lambda: first.state == second.state == "running", what="both workers to start")
    lines = [r.getMessage() for r in caplog.records if "autovacuum" in r.getMessage()]
    if not off:
        assert lines == []
        return
    assert lines == [
        "autovacuum is off on this PostgreSQL server: dead rows will pile up in rota's tables and claims "
        "slow down; turn it on, or VACUUM rota_runs regularly"
    ]
    assert [r.levelno for r in caplog.records if "autovacuum" in r.getMessage()] == [logging.WARNING]


@pytest.mark.postgres
def test_a_postgres_workers_own_metrics_show_the_vacuum_figures(
    pg_url: str, app_factory: Callable[..., rota.App]
) -> None:
    import urllib.request

    from rota.metrics import serve_worker_metrics

    from .ports import free_port

    app = app_factory(url=pg_url)
    worker = start_worker(app)
    wait_for(lambda: worker.state == "running", what="the worker to start")
    port = free_port()
    serve_worker_metrics(worker, port, host="127.0.0.1")
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"rota_db_oldest_xmin_age_seconds", "rota_db_dead_tuples", "rota_db_autovacuum"} <= names


def test_a_snapshot_no_transaction_has_aged_still_holds_back_cleanup() -> None:
    # Held 5 s while no new transaction id was handed out: age(backend_xmin) is 0, yet the
    # session holds the horizon (seen in CI when nothing else wrote meanwhile).
    line = _pg_vacuum.VacuumHealth(0, 5.0, True, {"rota_runs": 2}).line()
    assert line.startswith("oldest transaction holding back cleanup 5 s (0 transactions) old"), line
    assert _pg_vacuum.VacuumHealth(0, 0.2).line().startswith("nothing holds back cleanup")
