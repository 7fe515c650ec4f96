"""A forked child (a handler that forks, a pre-fork server) inherits the store's pooled
connections (and MySQL's token connection): sockets the parent still talks on. The child must
drop its copies without a goodbye (PostgreSQL's Terminate, MySQL's COM_QUIT would end the
parent's sessions on the server) and open its own (rota.stores.forks). Real fork(), the real
servers; SQLite too (its writers' lock: tests/test_sqlite_writers.py)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

import rota

from .conftest import WITH_MYSQL, make_app, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    yield from store_url(request, tmp_path)


def _sessions(app: rota.App) -> set[int]:
    """MySQL: the server's thread ids of the connections this process's store holds idle."""
    store: Any = app.store
    if store.dialect != "mysql":
        return set()
    pool = store._open()
    held = {conn.thread_id() for conn in pool._idle}
    if store._token_conn is not None:
        held.add(store._token_conn.thread_id())
    return held


def _in_child(work: Any) -> int:
    """`work` in a forked child; its exit code (it must end within 30 s)."""
    pid = os.fork()
    if pid == 0:  # the child: do the work, then leave as the docs say (os._exit)
        code = 0
        try:
            work()
        except BaseException:
            code = 1
        os._exit(code)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("the child hung (an inherited pool waits on threads that did not fork)")


def test_a_child_that_closes_the_app_leaves_the_parents_sessions_alone(db_url: str) -> None:
    app = make_app(db_url)
    app.migrate()

    @app.task(name="noop")
    def noop() -> None: ...

    noop.enqueue()
    assert rota.testing.run_pending(app) == 1  # the pool and the token connection open
    before = _sessions(app)
    assert _in_child(app.close) == 0
    noop.enqueue()  # on the parent's own sessions: none was ended by the child
    assert rota.testing.run_pending(app) == 1
    assert before <= _sessions(app), "the child's close ended a session of its parent"
    app.close()


def test_a_child_opens_its_own_sessions(db_url: str) -> None:
    app = make_app(db_url)
    app.migrate()

    @app.task(name="noop")
    def noop() -> None: ...

    noop.enqueue()
    rota.testing.run_pending(app)
    before = _sessions(app)

    def enqueue_and_close() -> None:
        noop.enqueue()
        app.close()

    assert _in_child(enqueue_and_close) == 0
    assert rota.testing.run_pending(app) == 1  # the child's run, on the parent's sessions
    assert before <= _sessions(app)
    app.close()
