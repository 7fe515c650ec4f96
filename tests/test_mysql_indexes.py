"""MySQL/MariaDB's indexes on rota_runs after migration 0024 (issue 42 item 4). With no partial
indexes, every index holding `status` moved an entry of every run at its claim and at its
finish: 11 of them. The ones that serve only some runs (limits, rates, schedules, misfires,
finished runs, pending runs) key virtual columns that are NULL outside what the index is for,
and the queries that read them still read them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import rota
from rota.stores.base import RunFilter

from .conftest import MYSQL, store_url


@pytest.fixture(params=[MYSQL])
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    yield from store_url(request, tmp_path)


def _index_columns(app: rota.App) -> dict[str, set[str]]:
    store: Any = app.store
    with store._read() as s:
        rows = s.q_text(
            "SELECT index_name, column_name FROM information_schema.statistics"
            " WHERE table_schema = DATABASE() AND table_name = 'rota_runs'"
        )
    indexes: dict[str, set[str]] = {}
    for name, column in rows:
        indexes.setdefault(str(name), set()).add(str(column))
    return indexes


def test_a_plain_runs_claim_and_finish_move_only_the_indexes_it_is_in(app_factory: Any) -> None:
    app = app_factory()
    app.migrate()
    indexes = _index_columns(app)
    # A plain run's claim moves its entry in an index only if a column of it changes: `status`
    # (or the time a claim sets) in these; the virtual columns stay NULL (or, for pending_held,
    # are NULL from the claim on: its finish leaves them).
    moved = {name for name, columns in indexes.items() if columns & {"status", "lease_until", "pending_held"}}
    assert moved == {"rota_runs_claim", "rota_runs_due", "rota_runs_lease", "rota_runs_status", "rota_runs_task_status"}
    assert {"limit_status", "held"} <= indexes["rota_runs_limit_waiting"]
    assert {"rate_status"} <= indexes["rota_runs_rate_waiting"]
    assert {"sched_status"} <= indexes["rota_runs_held"] & indexes["rota_runs_schedule_status"]
    assert indexes["rota_runs_misfire"] == {"misfire_pending"}
    assert indexes["rota_runs_finished"] == {"finished_at", "finished_status", "finished_attempt"}


def _plan(s: Any, sql: str, **params: Any) -> str:
    rows = s.q_text("EXPLAIN " + sql, **params)
    key = [d[0] for d in s.cur.description].index("key")
    return " ".join(str(r[key]) for r in rows)


def test_the_queries_of_the_lean_indexes_read_them(app_factory: Any) -> None:
    app = app_factory()
    app.migrate()
    store: Any = app.store
    with store._tx() as s:  # 20,000 runs: few limited, rated or scheduled, a quarter finished
        s.cur.execute(
            "INSERT INTO rota_runs (task, status, schedule, tick, scheduled_for, due_at, created_at, finished_at,"
            " limit_name, limit_key, rate_name, rate_key, misfire_at, attempt)"
            " WITH RECURSIVE a (j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM a WHERE j < 199),"
            " n (i) AS (SELECT x.j * 100 + y.j + 1 FROM a x JOIN a y WHERE y.j < 100)"
            " SELECT 't', ELT(1 + i % 4, 'pending', 'running', 'succeeded', 'failed'), IF(i % 7 = 0, 's', NULL),"
            " IF(i % 7 = 0, UTC_TIMESTAMP(6) + INTERVAL i SECOND, NULL), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6),"
            " UTC_TIMESTAMP(6), IF(i % 4 >= 2, UTC_TIMESTAMP(6) - INTERVAL i SECOND, NULL),"
            " IF(i % 97 = 0, 'L', NULL), IF(i % 97 = 0, 'k', NULL), IF(i % 89 = 0, 'R', NULL),"
            " IF(i % 89 = 0, 'k', NULL), IF(i % 13 = 0, UTC_TIMESTAMP(6), NULL), 1 FROM n"
        )
        s.cur.execute("ANALYZE TABLE rota_runs")
        s.cur.fetchall()
    params = {"name": "L", "key": "k", "queues": None, "n": 10, "limit": 10, "schedule": "s", "unresolved": "?",
              "tasks": '["t"]', "owner": "w", "lease": 30, "older_than": 10, "after": 0, "status": "succeeded"}  # fmt: skip
    expected = {
        "claim_ids": "rota_runs_claim",
        "poll_state": "rota_runs_due",
        "flow_waiting_limit": "rota_runs_limit_waiting",
        "flow_waiting_rate": "rota_runs_rate_waiting",
        "flow_limits": "rota_runs_limit_waiting",
        "flow_rates": "rota_runs_rate_waiting",
        "flow_unresolved_count": "rota_runs_limit_waiting",
        "flow_unknown_limits": "rota_runs_limit_waiting",
        "flow_unknown_rates": "rota_runs_rate_waiting",
        "stale_ahead": "rota_runs_misfire",
        "cancel_held": "rota_runs_held",
        "promote_held": "rota_runs_held",
        "cancel_schedule_pending": "rota_runs_schedule_status",
        "prune": "rota_runs_finished",
    }
    with store._read() as s:
        for query, index in expected.items():
            first = store.queries[query].split("\n;\n")[0]
            bound = {**params, "name": "s"} if "schedule" in index or "held" in index else params
            assert index in _plan(s, first, **bound), (query, _plan(s, first, **bound))
        suffix, where = store._runs_where(RunFilter(status="failed", schedule="s"))
        assert "rota_runs_schedule_status" in _plan(s, store.queries["run_columns"] + suffix, **where)
