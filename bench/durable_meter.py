"""What a drain of bench.durable costs in resources, beside its wall time: CPU of the worker's
process (the bench runs the worker in-process) and of the database server, and on PostgreSQL
the statements and commits it sent.

- Worker CPU: `time.process_time` of this process minus the bench's main thread's own
  (`time.thread_time`: it only waits and reads /proc), over the drain from its first 5 % of
  runs handled (the worker's connections are open by then) to its last handler's return
  (before the bench polls the database), per run handled in that window. On SQLite this is
  the database's CPU too.
- Server CPU: PostgreSQL, the backends serving the bench's database (bench.cpu.db_backends);
  MariaDB, the server threads serving its connections (bench.cpu.MySQLThreads); same window,
  read in nanoseconds (bench.cpu.cpu_ns_of). Background processes (WAL writer, checkpointer;
  InnoDB's own threads) are not counted.
- Statements (PostgreSQL): counted in this process by wrapping psycopg's `Cursor.execute` and
  `AsyncCursor.execute` (pg_stat_statements is not preloaded on the bench server), BEGIN /
  COMMIT / ROLLBACK / SAVEPOINT left out; commits: the bench database's `xact_commit` in
  pg_stat_database (read-only transactions included). Both over the worker app's whole life
  (start-up and shutdown included, the last few polls of the bench's wait too): PostgreSQL
  publishes a backend's counts when it exits or at most once a second, so the window closes
  once every backend of the database has gone.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sized
from typing import Any

from bench.cpu import cpu_ns_of, server_of

_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "START", "SAVEPOINT", "RELEASE", "END")


class _Statements:
    """psycopg statements executed in this process while `counting` is open."""

    def __init__(self) -> None:
        self.sent = 0

    def count(self, query: Any) -> None:
        text = query.decode(errors="replace") if isinstance(query, bytes) else query
        if not isinstance(text, str) or text.lstrip().split(" ", 1)[0].rstrip(";").upper() not in _CONTROL:
            self.sent += 1

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        import psycopg

        sync, async_ = psycopg.Cursor.execute, psycopg.AsyncCursor.execute

        def execute(cur: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            self.count(query)
            return sync(cur, query, *args, **kwargs)

        async def aexecute(cur: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            self.count(query)
            return await async_(cur, query, *args, **kwargs)

        psycopg.Cursor.execute = execute  # type: ignore[assignment,method-assign]
        psycopg.AsyncCursor.execute = aexecute  # type: ignore[assignment,method-assign]
        try:
            yield
        finally:
            psycopg.Cursor.execute = sync  # type: ignore[method-assign]
            psycopg.AsyncCursor.execute = async_  # type: ignore[method-assign]


def _pg_commits(admin_url: str, db: str, settle: float = 15.0) -> int:
    """The database's xact_commit once none of its backends is left (their counts published)."""
    from bench.dbs import PgProbe

    probe = PgProbe(admin_url)
    try:
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline:
            if not probe.scalar(f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{db}'"):
                break
            time.sleep(0.05)
        return int(probe.scalar(f"SELECT xact_commit FROM pg_stat_database WHERE datname = '{db}'"))
    finally:
        probe.close()


class DrainMeter:
    """`life()` around the worker app's whole life (statements, commits); `start` and `stop`
    around the CPU window; `tick` now and then in between."""

    def __init__(self, url: str, admin_url: str) -> None:
        self.url, self.admin = url, admin_url
        self.pg_db = url.rpartition("/")[2].partition("?")[0] if url.startswith("postgres") else None
        self.server = server_of(url)
        self.statements = _Statements()
        self.counts: dict[str, float] = {}
        self._handled = 0
        self._cpu = self._t0 = 0.0
        self._server: dict[int, float] = {}
        self._procs: list[Any] = []
        self._last: dict[int, float] = {}

    @contextlib.contextmanager
    def life(self, runs: int) -> Iterator[None]:
        if self.pg_db is None:
            yield
            return
        before = _pg_commits(self.admin, self.pg_db)
        with self.statements.counting():
            yield
        commits = _pg_commits(self.admin, self.pg_db) - before
        self.counts = {"statements": self.statements.sent / runs, "commits": commits / runs}

    def start(self, handled: Sized) -> None:
        self._procs = self.server() if self.server else []
        baseline = getattr(self.server, "baseline", None)  # MariaDB: threads reused from its cache
        self._server = {**(baseline(cpu_ns_of) if baseline else {}), **cpu_ns_of(self._procs)}
        self._handled = len(handled)
        self._cpu, self._t0 = time.process_time() - time.thread_time(), time.monotonic()

    def tick(self) -> None:
        """Re-read the known server processes, so that one gone before `stop` still counts."""
        self._last.update(cpu_ns_of(self._procs))

    def stop(self, handled: Sized) -> dict[str, float]:
        worker = time.process_time() - time.thread_time() - self._cpu
        runs = len(handled) - self._handled
        out = {"worker_us": 1e6 * worker / runs}
        if self.server is not None and self._server:  # none found: a server on another host
            now = cpu_ns_of(self.server())
            now = {**{p: t for p, t in self._last.items() if p in self._server and p not in now}, **now}
            out["server_us"] = 1e6 * sum(t - self._server.get(p, 0.0) for p, t in now.items()) / runs
        return out
