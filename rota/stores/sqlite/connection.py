"""SQLite connection helpers: the session over a connection, the writers' queue (one mutex
per file in this process, a lock file across processes), busy-timeout and error
translation, and migration scripts split into statements."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import pwd
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote, urlparse

from ...errors import (
    ConfigurationError,
    DatabaseError,
    DatabaseTransient,
    DatabaseUnavailable,
    SchemaVersionError,
)
from ..sqlstore.base import Row

# A batch of rows as one JSON parameter (a statement reads it with json_each and ->>, which
# gives back each string as it was). Text is not escaped to ASCII: results are JSON text,
# often not ASCII, and escaping them would only cost time.
json_batch = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


class _Session:
    __slots__ = ("conn", "now", "queries", "wake")

    def __init__(self, conn: sqlite3.Connection | sqlite3.Cursor, queries: dict[str, str], now: float) -> None:
        self.conn = conn
        self.queries = queries
        self.now = now
        self.wake: list[str] = []

    def q(self, name: str, /, **params: Any) -> list[Row]:
        return self.q_text(self.queries[name], **params)

    def q_text(self, sql: str, /, **params: Any) -> list[Row]:
        params["now"] = self.now
        return self.conn.execute(sql, params).fetchall()


def _user() -> str:
    try:
        return f"user {pwd.getpwuid(os.geteuid()).pw_name!r}"
    except (KeyError, AttributeError):  # pragma: no cover - no passwd entry / not POSIX
        return "this user"


def create_private(path: str) -> None:
    """Create the database file readable by its owner only (0600, or stricter where the umask
    says so) if it does not exist yet: it holds arguments, results and tracebacks. SQLite
    gives its -wal and -shm files the mode of the database file. An existing file keeps its
    mode; a file that cannot be created here is left to sqlite3 to report. A path that is a
    symlink (dangling too) names the file it points to, as for SQLite, which follows it."""
    path = os.path.realpath(path)  # (O_EXCL refuses a dangling link; SQLite would then create 0644)
    if os.path.exists(path):
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:  # created meanwhile by another process, or a missing directory
        return
    os.close(fd)


def _busy_timeout(text: str, url: str) -> float:
    """`?busy_timeout=` seconds a writer waits for the write lock: 0 to 3600."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 3600:
        raise ConfigurationError(
            f"invalid busy_timeout={text!r} in {url!r}: give the seconds a writer waits for the "
            "write lock, a number from 0 to 3600 (default 30)"
        )
    return value


_writer_locks: dict[str, threading.Lock] = {}
_writer_locks_guard = threading.Lock()


def _writer_lock(path: str) -> threading.Lock:
    key = os.path.realpath(path)
    with _writer_locks_guard:
        lock = _writer_locks.get(key)
        if lock is None:
            lock = _writer_locks[key] = threading.Lock()
        return lock


class Writers:
    """The queue for the write lock: this process's writers of a file wait on one mutex,
    other processes' on a POSIX record lock of `<db>-writers` (fcntl F_SETLK). SQLite's busy
    handler, where they would otherwise meet, sleeps 1, 2, 5, 10... ms between tries while a
    transaction holds the lock for a fraction of one; a writer here tries the file again after
    20 µs, doubling to 250 µs. The file only orders the writers: SQLite's lock still decides,
    so where the file cannot be made or locked, writers just meet in SQLite's handler.

    A record lock belongs to the process that took it: a child forked by a handler does not
    share it, and it ends with its process, whatever that process's children still hold open
    (a flock belongs to the open file, which a forked child keeps). Closing any descriptor of
    the file drops the process's record locks, so a descriptor is closed only under the mutex
    (the lock is held only under it), and the mutex still keeps this process's threads apart.

    A writer waits at most `timeout` seconds (busy_timeout) from its first wait, on the mutex
    and the file together, then fails as SQLite's would: DatabaseTransient, nothing written.
    (The writer at the head of the queue may then wait `timeout` again in SQLite's handler,
    for a lock taken outside the queue: a transactional handler's, or a transaction on your
    own connection.)"""

    def __init__(self, path: str, timeout: float) -> None:
        self.path = os.path.realpath(path)  # (the mutex's key too: one queue per file)
        self.timeout = timeout
        self._fd: int | None = None
        self._pid = 0  # the process that opened _fd (a forked child opens its own)
        self._closed = False
        self._mutex = (-1, threading.Lock())  # (fork generation, this process's mutex of the file)

    def mutex(self) -> threading.Lock:
        if self._mutex[0] != _forks:
            self._mutex = (_forks, _writer_lock(self.path))
        return self._mutex[1]

    def __enter__(self) -> None:
        mutex = self.mutex()
        began = 0.0  # when this writer began to wait (0: not yet)
        if not mutex.acquire(blocking=False):
            began = time.monotonic()
            if not mutex.acquire(timeout=self.timeout):
                raise self._busy()
        try:
            self._queue(began)
        except BaseException:
            self._unlock()
            mutex.release()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self._unlock()
            if self._closed:
                self._close_file()
        finally:
            self._mutex[1].release()

    def _unlock(self) -> None:
        if self._fd is not None:  # (unlocking a file not locked is harmless)
            with contextlib.suppress(OSError):
                fcntl.lockf(self._fd, fcntl.LOCK_UN)

    def _busy(self) -> DatabaseTransient:
        return DatabaseTransient(
            f"SQLite database {self.path!r}: other writers kept it busy for {self.timeout:g} s "
            "(busy_timeout); nothing was written, try again"
        )

    def _queue(self, began: float) -> None:
        """Under the mutex: wait for the other processes' writers, until `timeout` after
        `began` (or after now, if this writer has not waited yet)."""
        fd, delay = self._file(), FIRST_TRY
        while fd is not None:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError as exc:
                if exc.errno not in _HELD:  # no record locks on this filesystem: SQLite's handler alone
                    return
                now = time.monotonic()
                began = began or now
                if now >= began + self.timeout:
                    raise self._busy() from None
                time.sleep(delay)
                delay = min(2 * delay, LAST_TRY)

    def _file(self) -> int | None:
        """The lock file, opened once per process with the database's mode (so not before
        the database file exists; an exclusive record lock needs it open for writing); None
        where it cannot be (a user who may write the database but not this file writes
        outside the queue)."""
        if self._fd is not None and self._pid == os.getpid():
            return self._fd
        if self._closed:
            return None
        self._close_file()  # a forked child's copy: its own instead (closing it drops no lock of the parent)
        try:
            mode = os.stat(self.path).st_mode & 0o666
            self._fd = os.open(self.path + "-writers", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode)
            self._pid = os.getpid()
        except OSError:  # no database file yet (its first transaction creates it), or no room
            self._fd = None
        return self._fd

    def _close_file(self) -> None:
        """Only under the mutex: closing drops this process's record locks on the file."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        """Close the file now, or (a writer is in the queue or writing) when it is done."""
        self._closed = True
        mutex = self.mutex()
        if mutex.acquire(blocking=False):
            try:
                self._close_file()
            finally:
                mutex.release()


class Connections:
    """Each thread's connection to the file, fenced against close(): Python's sqlite3 can
    crash the interpreter (SIGSEGV) when one thread closes a connection another thread is
    inside a statement on. A store call holds its thread's connection with `use()`;
    close() closes the connections not in use, and a thread in a call when the store closes
    closes its own as the call ends. A call after close() raises DatabaseError."""

    def __init__(self, connect: Callable[[], sqlite3.Connection]) -> None:
        self._connect = connect
        self._local = threading.local()
        self.all: dict[threading.Thread, sqlite3.Connection] = {}
        self._using: dict[threading.Thread, int] = {}  # threads in a call: how deep
        self._lock = threading.Lock()
        self.closed = False

    @contextmanager
    def use(self) -> Iterator[sqlite3.Connection]:
        me = threading.current_thread()
        with self._lock:
            if self.closed:
                raise DatabaseError("the store is closed")
            self._using[me] = self._using.get(me, 0) + 1
        try:
            yield self.get()
        finally:
            with self._lock:
                depth = self._using.pop(me) - 1
                if depth:
                    self._using[me] = depth
                last = self.closed and not depth
            if last:  # the store closed during the call: the thread closes its own connection
                self.release()

    def get(self) -> sqlite3.Connection:
        """The calling thread's connection (opened on first use)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._lock:
                dead = [t for t in self.all if not t.is_alive()]
                orphans = [self.all.pop(t) for t in dead]
                self.all[threading.current_thread()] = conn
            for orphan in orphans:  # connections of threads that ended: at most one per live thread
                with contextlib.suppress(sqlite3.Error):
                    orphan.close()
        return conn

    def release(self) -> None:
        """Close the calling thread's connection (a thread about to end, or the store closed)."""
        with self._lock:
            self.all.pop(threading.current_thread(), None)
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    def close(self) -> None:
        """Refuse new calls; close every connection no thread is in a call on (the others
        are closed by their threads as their calls end)."""
        with self._lock:
            self.closed = True
            idle = [t for t in self.all if t not in self._using]
            conns = [self.all.pop(t) for t in idle]
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()


_HELD = (errno.EACCES, errno.EAGAIN)  # F_SETLK's answers when another process holds the lock


_forks = 0  # forks into this process (Writers take fresh mutexes after one)


def _new_writer_locks() -> None:
    """In a forked child: fresh mutexes (one held by a parent's thread would never be let go)."""
    global _forks, _writer_locks_guard
    _forks += 1
    _writer_locks.clear()
    _writer_locks_guard = threading.Lock()


os.register_at_fork(after_in_child=_new_writer_locks)


FIRST_TRY = 0.00002  # seconds a writer waits before it tries the writers' file again ...
LAST_TRY = 0.00025  # ... doubling up to this: a transaction holds the lock for 0.1-1 ms


def _translate(exc: sqlite3.Error, path: str) -> DatabaseError:
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and ("unable to open" in text or "disk I/O" in text):
        return DatabaseUnavailable(f"SQLite database {path!r}: {text}")
    if isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text or "readonly" in text):
        return DatabaseTransient(
            f"SQLite database {path!r}: {text} (another writer held it, or the file is read-only for now; try again)"
        )
    return DatabaseError(f"SQLite database {path!r}: {text}")


def _check_not_newer(current: int, latest: int, where: str) -> None:
    if current > latest:
        raise SchemaVersionError(
            f"the database {where} has rota schema version {current}, newer than the {latest} this "
            "version of rota knows: upgrade rota on this host (never run older code against a "
            "migrated database)"
        )


def _statements(script: str) -> Iterator[str]:
    """Split a SQL script into complete statements (trigger bodies keep their semicolons)."""
    buffer = ""
    for line in script.splitlines(keepends=True):
        if line.lstrip().startswith("--") and not buffer.strip():
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            yield buffer.strip()
            buffer = ""
    if buffer.strip():
        raise DatabaseError(f"incomplete SQL statement in migration: {buffer[:80]!r}")


def sqlite_path(url: str) -> str:
    """The file path of a sqlite:/// URL (relative: sqlite:///rota.db; absolute: sqlite:////x)."""
    parsed = urlparse(url)
    path = unquote(parsed.path)
    if parsed.netloc not in ("", "localhost"):
        raise ConfigurationError(
            f"invalid SQLite URL {url!r}: use sqlite:///relative/path.db or sqlite:////absolute/path.db"
        )
    path = path[1:] if path.startswith("/") else path
    if "\x00" in path:
        raise ConfigurationError(
            f"invalid SQLite URL {url!r}: the path {path!r} contains a NUL character (%00), which no file name can hold"
        )
    if path in ("", ":memory:"):
        raise ConfigurationError(
            f"invalid SQLite URL {url!r}: rota needs a database file that workers share, e.g. sqlite:///rota.db"
        )
    return path
