"""SQLite builds a temporary b-tree for an `IN` list of three or more constants, each time the
test runs. A claim and a finish change `status` row by row, so no predicate SQLite tests on
such a change may hold one (migration 0013): the indexes on rota_runs, the table's CHECK and
the statements of the run lifecycle's hot path."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from rota.stores.base import Outcome, RunFilter
from rota.stores.sqlite import store as sqlite_module
from rota.stores.sqlstore.queries import load_migrations

from .conftest import make_app

LONG_IN = re.compile(r"\bIN\s*\(\s*'[^']*'\s*,\s*'[^']*'\s*,", re.IGNORECASE)
HOT = ("claim", "claim_in_queues", "finish_succeeded", "finish", "start", "heartbeat", "hand_back")


def _definitions(path: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE tbl_name = 'rota_runs' AND sql IS NOT NULL")
        return [(name, sql) for name, sql in rows]


def _main_program_ephemerals(conn: sqlite3.Connection, sql: str) -> int:
    """OpenEphemeral opcodes a statement runs for itself (its triggers' programs not counted:
    EXPLAIN lists them after the main program's Halt)."""
    ops = [row[1] for row in conn.execute("EXPLAIN " + sql, dict.fromkeys(re.findall(r":(\w+)", sql)))]
    return ops[: ops.index("Halt")].count("OpenEphemeral")


def test_no_status_test_on_the_runs_table_holds_a_long_in_list(tmp_path: Path) -> None:
    app = make_app(f"sqlite:///{tmp_path}/rota.db")
    try:
        app.migrate()
        assert [name for name, sql in _definitions(tmp_path / "rota.db") if LONG_IN.search(sql)] == []
    finally:
        app.close()


def test_a_finish_and_a_heartbeat_build_no_temporary_table_row_by_row(tmp_path: Path) -> None:
    """The per-run statements (executed once per run): no temporary b-tree at all. The claim
    and the plain successes' finish run once per batch; the claim's window functions sort and
    the finish buffers its rows, but no status test builds one per row."""
    app = make_app(f"sqlite:///{tmp_path}/rota.db")
    try:
        app.migrate()
        queries: Any = app.store.queries  # type: ignore[attr-defined]
        with sqlite3.connect(tmp_path / "rota.db") as conn:
            counts = {name: _main_program_ephemerals(conn, queries[name]) for name in HOT}
        # the claim's (once per batch): its window and its subqueries' sorts; the batched
        # finish's (once per batch): the UPDATE ... FROM's buffer of the rows it will write
        assert counts == {
            "claim": 3,
            "claim_in_queues": 4,
            "finish_succeeded": 1,
            "finish": 0,
            "start": 0,
            "heartbeat": 0,
            "hand_back": 0,
        }
    finally:
        app.close()


def test_a_populated_version_12_database_migrates_in_place_and_keeps_refusing_bad_statuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path}/rota.db"
    from .test_hot_path import before_paused_queues

    with monkeypatch.context() as patch:
        patch.setattr(sqlite_module, "load_migrations", lambda _d: load_migrations("sqlite")[:12])
        load = sqlite_module.load_queries
        patch.setattr(
            sqlite_module,
            "load_queries",  # (a version-12 store: no durable steps, whose tables come in 0022)
            lambda *a: {k: before_paused_queues(v) for k, v in load(*a).items() if k != "save_step"},
        )
        old = make_app(url)
        assert old.migrate()[-1] == "0012_history_listings"

        @old.task(name="t")
        def t() -> None: ...

        t.enqueue_many([((), {})] * 9)
        claimed = old.store.claim("w", 6, None, 30)
        old.store.finish([Outcome(c.id, c.token, "succeeded") for c in claimed if c.id % 2 == 0])
        with sqlite3.connect(tmp_path / "rota.db") as conn:  # as a version-12 worker fails a run (this
            conn.executemany(  # code's `finish` also clears refused_at, a column of version 15)
                "UPDATE rota_runs SET status = 'failed', finished_at = started_at, lease_until = NULL,"
                ' error = \'{"type": "E"}\' WHERE id = ?',
                [(c.id,) for c in claimed if c.id % 2],
            )
        before = {r.id: r.status for r in old.list_runs()}
        old.close()
    app = make_app(url)
    try:
        assert app.migrate() == [
            "0013_cheap_status_tests", "0014_rate_waited", "0015_refused_at", "0016_limit_told", "0017_history",
            "0018_saturated_counters", "0019_traceparent", "0020_worker_lease", "0021_operators",
            "0022_durable_steps",
            "0023_claim_from",
            "0024_mysql_lean_indexes",
        ]  # fmt: skip
        assert {r.id: r.status for r in app.list_runs()} == before
        assert [name for name, sql in _definitions(tmp_path / "rota.db") if LONG_IN.search(sql)] == []
        with sqlite3.connect(tmp_path / "rota.db") as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
                conn.execute("UPDATE rota_runs SET status = 'done' WHERE id = 1")
        failed = [r.id for r in app.list_runs(task="t", status="failed")]
        assert failed == [i for i, s in before.items() if s == "failed"]
        suffix, params = app.store._runs_where(RunFilter(status="failed", task="t"))  # type: ignore[attr-defined]
        with sqlite3.connect(tmp_path / "rota.db") as conn:
            plan = " ".join(
                str(r) for r in conn.execute(f"EXPLAIN QUERY PLAN SELECT id FROM rota_runs{suffix}", params)
            )
        assert "rota_runs_unhappy_task" in plan
    finally:
        app.close()


def _t(i: int) -> int:
    return i


def _finished(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM rota_runs WHERE finished_at IS NOT NULL").fetchone()[0])


WORKER_AT_12 = textwrap.dedent(
    """
    import sys
    import rota
    from rota.stores.sqlite import store as sqlite_module
    from rota.stores.sqlstore.queries import load_migrations

    sqlite_module.load_migrations = lambda _d: load_migrations("sqlite")[:12]  # the previous release
    from tests.test_hot_path import before_paused_queues  # its statements had no paused-queues guard
    load = sqlite_module.load_queries
    sqlite_module.load_queries = lambda *a: {k: before_paused_queues(v) for k, v in load(*a).items()}
    app = rota.App(sys.argv[1], poll_interval=0.02, lease=5.0, retention=None)

    @app.task(name="t", retries=1, backoff=0.01)
    def t(i: int) -> int:
        if i % 7 == 0:
            raise ValueError(f"boom {i}")
        return i

    app.run_worker(concurrency=4, shutdown_timeout=5.0)
    """
)


def test_a_worker_of_the_previous_schema_works_on_through_the_migration(tmp_path: Path) -> None:
    """A rolling upgrade: a worker process at version 12 claims and finishes while another
    process migrates the file to 13, and after."""
    url = f"sqlite:///{tmp_path}/rota.db"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sqlite_module, "load_migrations", lambda _d: load_migrations("sqlite")[:12])
        old = make_app(url)
        old.migrate()
        old.task(name="t")(_t).enqueue_many([((i,), {}) for i in range(400)])
        old.close()
    worker = subprocess.Popen([sys.executable, "-c", WORKER_AT_12, url], stderr=subprocess.PIPE, text=True)
    app = make_app(url)
    t = app.task(name="t")(_t)
    try:
        deadline = time.monotonic() + 30
        while _finished(tmp_path / "rota.db") < 50 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert app.migrate() == [
            "0013_cheap_status_tests",
            "0014_rate_waited",
            "0015_refused_at",
            "0016_limit_told",
            "0017_history",
            "0018_saturated_counters",
            "0019_traceparent",
            "0020_worker_lease",
            "0021_operators",
            "0022_durable_steps",
            "0023_claim_from",
            "0024_mysql_lean_indexes",
        ]  # while the worker claims and finishes
        assert _finished(tmp_path / "rota.db") < 400
        t.enqueue_many([((i,), {}) for i in range(400, 800)])
        while app.stats()["pending"] + app.stats()["running"] and time.monotonic() < deadline:
            time.sleep(0.05)
        runs = app.list_runs(limit=1000)
        assert len(runs) == 800 and {r.status for r in runs} == {"succeeded", "failed"}
        assert {r.id for r in runs if r.status == "failed"} == {r.id for r in runs if r.args[0] % 7 == 0}
        with sqlite3.connect(tmp_path / "rota.db") as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            tokens = [row[0] for row in conn.execute("SELECT token FROM rota_runs")]
            assert len(set(tokens)) == len(tokens)  # one fencing token per attempt, across both
    finally:
        worker.terminate()
        _, err = worker.communicate(timeout=15)
        app.close()
    assert worker.returncode == 0, err
    assert "Traceback" not in err.replace("ValueError: boom", ""), err
