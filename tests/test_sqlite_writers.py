"""SQLite writers of several processes queue on `<db>-writers` (rota.stores.sqlite.connection.Writers)
instead of meeting in SQLite's busy handler: a writer waits while another process writes and
goes on as soon as it is done; one kept waiting past busy_timeout fails with
DatabaseTransient and writes nothing, however many of its process's writers wait before it;
a lock file that cannot be opened only loses the queue; a closed store leaves no file open;
a helper forked by a handler does not keep the lock once its worker is killed (issue 41 items
2 and 15). The other processes here are real ones."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import rota
from rota.errors import DatabaseTransient
from rota.stores.sqlite.connection import Writers

from .conftest import make_app
from .procs import WorkerProcs, wait_until

HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()  # hold until told
"""


@contextmanager
def other_writer(db: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the writers' file until the block ends."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, f"{db}-writers"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        yield proc
    finally:
        if proc.poll() is None:
            assert proc.stdin is not None
            proc.stdin.write("\n")
            proc.stdin.flush()
        proc.wait(timeout=10)


def _app(db: Path, query: str = "") -> tuple[rota.App, rota.Task]:
    app = rota.App(f"sqlite:///{db}{query}", retention=None)
    return app, app.task(name="t")(lambda: None)


def test_a_writer_waits_while_another_process_writes_and_goes_on_once_it_is_done(tmp_path: Path) -> None:
    db = tmp_path / "rota.db"
    app, task = _app(db)
    try:
        task.enqueue()  # the schema and the writers' file exist
        done = threading.Event()
        with other_writer(db):
            writer = threading.Thread(target=lambda: (task.enqueue(), done.set()))
            writer.start()
            assert not done.wait(0.3)  # queued behind the other process
        assert done.wait(5)  # that process is gone: the queue goes on
        writer.join()
        assert app.store.count_by_status() == {"pending": 2}
    finally:
        app.close()


def test_a_writer_kept_waiting_past_busy_timeout_fails_and_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "rota.db"
    app, task = _app(db, "?busy_timeout=0.3")
    try:
        task.enqueue()
        with other_writer(db):
            began = time.monotonic()
            with pytest.raises(
                rota.DatabaseTransient,
                match=r"other writers kept it busy for 0\.3 s \(busy_timeout\); nothing was written",
            ):
                task.enqueue()
            assert 0.25 < time.monotonic() - began < 3
        assert app.store.count_by_status() == {"pending": 1}
        task.enqueue()  # the other process is gone: writes go on
        assert app.store.count_by_status() == {"pending": 2}
    finally:
        app.close()


def test_a_writers_file_that_cannot_be_opened_only_loses_the_queue(tmp_path: Path) -> None:
    db = tmp_path / "rota.db"
    (tmp_path / "rota.db-writers").mkdir()  # no file can be opened there
    app, task = _app(db)
    try:
        task.enqueue()
        assert app.store.count_by_status() == {"pending": 1}
    finally:
        app.close()


def test_the_writers_file_has_the_database_files_mode_and_closed_stores_leave_none_open(tmp_path: Path) -> None:
    db = tmp_path / "rota.db"
    db.touch()
    db.chmod(0o640)
    old = os.umask(0o022)
    try:
        open_fds = len(os.listdir("/proc/self/fd"))
        for _ in range(20):
            app, task = _app(db)
            task.enqueue()
            app.close()
        assert len(os.listdir("/proc/self/fd")) <= open_fds + 2  # (pytest's own may come and go)
    finally:
        os.umask(old)
    assert oct(os.stat(f"{db}-writers").st_mode & 0o777) == oct(0o640)


def test_the_queue_starts_once_the_database_file_exists(tmp_path: Path) -> None:
    """Writers takes the database file's mode, so it makes no file before the database's;
    the first transaction, which creates the database, runs without it, the next ones queue."""
    db = tmp_path / "rota.db"
    writers = Writers(str(db), 1.0)
    try:
        with writers:
            pass
        assert not (tmp_path / "rota.db-writers").exists()
        db.touch()
        with writers:
            assert (tmp_path / "rota.db-writers").exists()
    finally:
        writers.close()


def test_a_forked_child_queues_behind_its_parent_and_close_inside_a_write_waits_for_it(tmp_path: Path) -> None:
    """A child forked while its parent writes opens its own lock file (a shared one would let
    it in) and takes a fresh mutex (the parent's thread would never let the copy go); close()
    called while this thread writes does not wait for itself: the file closes after the write."""
    db = tmp_path / "rota.db"
    db.touch()
    writers = Writers(str(db), 0.3)
    with writers:
        pid = os.fork()
        if pid == 0:  # the child: must wait for the parent's lock, then time out
            code = 1
            try:
                with writers:
                    code = 2
            except DatabaseTransient:
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        writers.close()  # inside a write: returns at once
        assert writers._fd is not None
    assert os.waitstatus_to_exitcode(status) == 0
    assert writers._fd is None


def test_every_writer_of_a_process_waits_at_most_busy_timeout_from_its_own_start(tmp_path: Path) -> None:
    """Five threads queue behind another process's lock: each fails busy_timeout after it began
    to wait, not the k-th after k times busy_timeout (the mutex's wait counts too)."""
    db = tmp_path / "rota.db"
    app, task = _app(db, "?busy_timeout=1")
    waited: list[float] = []
    failed: list[BaseException] = []

    def write() -> None:
        began = time.monotonic()
        try:
            task.enqueue()
        except DatabaseTransient as exc:
            failed.append(exc)
        waited.append(time.monotonic() - began)

    try:
        task.enqueue()
        with other_writer(db):
            threads = [threading.Thread(target=write) for _ in range(5)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
        assert len(failed) == 5 and all("kept it busy for 1 s (busy_timeout)" in str(e) for e in failed)
        assert min(waited) > 0.9 and max(waited) < 2.0, waited  # (today's main: 1, 2, 3, 4, 5 s)
        assert app.store.count_by_status() == {"pending": 1}
    finally:
        app.close()


@pytest.mark.parametrize("how", ["os", "multiprocessing"])
def test_a_helper_forked_by_a_handler_keeps_no_lock_once_its_worker_is_killed(tmp_path: Path, how: str) -> None:
    """A handler forks a helper that sleeps on, then its worker is killed by kill -9 in the
    middle of a write. The helper inherited the writers' file; the lock must end with the
    worker all the same: another process enqueues at once and the run is rescued."""
    url = f"sqlite:///{tmp_path}/rota.db?busy_timeout=3"
    procs = WorkerProcs(url, tmp_path)
    app = make_app(url)
    report = tmp_path / "helper.pid"
    task = app.task(name="fork_then_write", retries=1, backoff=0)(lambda how, report: None)  # (as the worker's)
    helper = 0
    try:
        run = task.enqueue(how, str(report))
        victim = procs.start("tests.apps.forking:app", lease=1.0, poll=0.05)
        wait_until(report.exists, 60, "the handler to fork and begin its write")
        helper = int(report.read_text())
        procs.kill9(victim)
        os.kill(helper, 0)  # the helper lives on, holding the file the worker had open
        began = time.monotonic()
        task.options(delay=3600).enqueue(how, str(tmp_path / "unused"))
        assert time.monotonic() - began < 1.5
        procs.start("tests.apps.forking:app", lease=1.0, poll=0.05)
        wait_until(lambda: app.get_run(run.id).status == "succeeded", 60, "the dead worker's run to be rescued")
        done = app.get_run(run.id)
        assert done.attempt == 2 and done.history[0]["status"] == "lost" and done.result == 2
        os.kill(helper, 0)  # still alive: the rescue did not wait for it
    finally:
        procs.stop_all()
        if helper:
            with contextlib.suppress(ProcessLookupError):
                os.kill(helper, signal.SIGKILL)
        app.close()
