"""A store closed under a worker's store call (CI: a pytest-xdist worker died of SIGSEGV in
sqlite3, in a leftover rota-db thread's `fail_orphaned`).

A stopping worker cancels its roles' tasks; a task awaiting a store call stops waiting, but
the call runs on, on a rota-db thread. The worker said it had stopped at once, the app was
closed, and SQLiteStore.close() closed every thread's connection, that thread's too, mid-
statement: Python's sqlite3 then reads freed memory (SIGSEGV) or, between statements, fails
with ProgrammingError. Now a worker is stopped only once its store calls have ended (at most
STORE_CALLS_GRACE), and the SQLite store never closes a connection a call is using: that
thread closes its own as the call ends; a call after close() raises DatabaseError."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rota
from rota.errors import DatabaseError
from rota.stores.sqlite import SQLiteStore
from rota.worker import maintenance

from .conftest import WITH_MYSQL, start_worker, store_url, wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def test_a_worker_is_stopped_only_once_its_store_call_under_way_has_ended(
    app: rota.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(maintenance, "FLOW_CHECK_SECONDS", 0.05)  # the flow check at once
    monkeypatch.setattr(importlib.import_module("rota.worker.worker"), "STORE_CALLS_GRACE", 60.0)
    entered, release, ended = threading.Event(), threading.Event(), threading.Event()
    store: Any = app.store
    real = store.fail_orphaned

    def fail_orphaned(limit: int = 100) -> list[int]:
        entered.set()
        release.wait(20)
        try:
            return list(real(limit))
        finally:
            ended.set()

    monkeypatch.setattr(store, "fail_orphaned", fail_orphaned)
    worker = start_worker(app)
    assert entered.wait(20), "the flow check never called fail_orphaned"
    worker.stop(wait=False)
    wait_for(lambda: worker.state == "stopped", what="the shutdown's last write")
    assert not worker.stop(wait=True, timeout=0.5), "stopped with fail_orphaned still under way"
    release.set()
    assert worker.stop(wait=True, timeout=10)
    assert ended.is_set()  # the call ended before the worker said it had stopped: app.close() is safe


def test_a_call_under_way_when_the_store_closes_ends_on_its_connection_and_later_calls_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path}/rota.db")
    store.migrate()
    entered, release = threading.Event(), threading.Event()
    outcome: list[Any] = []
    real_q = store.queries["deps_orphaned"]

    def hold_then_run() -> None:
        try:
            with store._tx() as s:  # fail_orphaned's transaction, between two statements
                s.q_text("SELECT count(*) FROM rota_runs")
                entered.set()
                release.wait(20)
                outcome.append(s.q_text(real_q, error="{}", limit=1))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=hold_then_run)
    thread.start()
    assert entered.wait(20)
    store.close()
    assert len(store._all) == 1  # the one in use stays open, for its thread to finish with
    release.set()
    thread.join(20)
    assert outcome == [[]]
    assert store._all == {}  # its thread closed it as the call ended
    with pytest.raises(DatabaseError, match="closed"):
        store.fail_orphaned()
    with pytest.raises(DatabaseError, match="closed"):
        store.data_version()


_INSIDE_A_STATEMENT = """
import threading, sys
from rota.stores.sqlite import SQLiteStore

store = SQLiteStore(sys.argv[1])
store.migrate()
entered, release = threading.Event(), threading.Event()

def wait() -> int:
    entered.set()
    release.wait(20)
    return 1

# fail_orphaned's statement, held inside sqlite3_step (the user function) while the store closes
store.queries = dict(store.queries, deps_orphaned="SELECT 1, 1 WHERE rota_wait() = 0 AND :error <> '' AND :limit > 0")
result = []
def call() -> None:
    store._conn().create_function("rota_wait", 0, wait)  # this thread's connection
    result.append(store.fail_orphaned())

thread = threading.Thread(target=call)
thread.start()
assert entered.wait(20)
store.close()
release.set()
thread.join(20)
assert result == [[]], result
print("ok")
"""


def test_closing_the_store_while_a_thread_is_inside_a_statement_does_not_crash(tmp_path: Path) -> None:
    """The crash itself, in a child process (before the fix: killed by SIGSEGV)."""
    script = textwrap.dedent(_INSIDE_A_STATEMENT)
    done = subprocess.run(
        [sys.executable, "-c", script, f"sqlite:///{tmp_path}/rota.db"], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr[-2000:]
