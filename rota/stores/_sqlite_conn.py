"""SQLite connection helpers: the session over a connection, the writers' queue (one mutex
per file in this process, a lock file across processes), busy-timeout and error
translation, and migration scripts split into statements."""

from __future__ import annotations

import fcntl
import json
import math
import os
import pwd
import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote, urlparse

from ..errors import (
    ConfigurationError,
    DatabaseError,
    DatabaseTransient,
    DatabaseUnavailable,
    SchemaVersionError,
)
from ._sql_base import Row

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
    mode; a file that cannot be created here is left to sqlite3 to report."""
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
    other processes' on `<db>-writers` with flock. SQLite's busy handler, where they would
    otherwise meet, sleeps 1, 2, 5, 10... ms between tries while a transaction holds the lock
    for a fraction of one; a writer here tries the file again after 20 µs, doubling to 250 µs.
    The file only orders the writers: SQLite's lock still decides, so where the file cannot
    be made or locked, writers just meet in SQLite's handler. A writer that waits `timeout`
    seconds (busy_timeout) fails as SQLite's would: DatabaseTransient, nothing written."""

    def __init__(self, path: str, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self.mutex = _writer_lock(path)
        self._fd: int | None = None
        self._opened = False
        self._held = False

    def __enter__(self) -> None:
        self.mutex.acquire()
        try:
            self._held = self._queue()
        except BaseException:
            self.mutex.release()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            if self._held and self._fd is not None:
                self._held = False
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self.mutex.release()

    def _queue(self) -> bool:
        """Under the mutex: wait for the other processes' writers (True: the file is locked)."""
        fd, deadline, delay = self._file(), 0.0, FIRST_TRY
        while fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                now = time.monotonic()
                deadline = deadline or now + self.timeout
                if now >= deadline:
                    raise DatabaseTransient(
                        f"SQLite database {self.path!r}: another process kept writing for {self.timeout:g} s "
                        "(busy_timeout); nothing was written, try again"
                    ) from None
                time.sleep(delay)
                delay = min(2 * delay, LAST_TRY)
            except OSError:  # no flock on this filesystem: SQLite's handler alone
                return False
        return False

    def _file(self) -> int | None:
        """The lock file, opened once (with the database's mode, so not before the database
        file exists); None where it cannot be."""
        if not self._opened:
            try:
                mode = os.stat(self.path).st_mode & 0o666
            except OSError:
                return None  # no database file yet: its first transaction creates it
            self._opened = True
            try:
                self._fd = os.open(self.path + "-writers", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode)
            except OSError:
                self._fd = None
        return self._fd

    def close(self) -> None:
        with self.mutex:
            fd, self._fd, self._opened = self._fd, None, True
            if fd is not None:
                os.close(fd)


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
