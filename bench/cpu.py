"""CPU and memory of the processes under test: worker processes and database backends.

The PostgreSQL side counts the backends serving the run's bench_* database (found by their
process titles, so the server must run on this host); background processes (WAL writer,
checkpointer, autovacuum launcher) are not included. MariaDB serves each connection on a
thread of its one process: the threads of the connections to the run's database (the TID
column of information_schema.PROCESSLIST, MariaDB 10.5+) are counted, not InnoDB's own
background threads (log writer, purge). SQLite runs inside the worker processes, so there
the worker's CPU is the database's CPU too.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.core import Metrics, Unsupported


def db_backends(db: str) -> list[Any]:
    """The PostgreSQL backend processes serving database `db` (by their process titles)."""
    import psutil

    marker = f" {db} "
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        title = " ".join(proc.info["cmdline"] or [])
        if title.startswith("postgres:") and marker in title:
            found.append(proc)
    return found


class _Times:
    def __init__(self, user: float, system: float) -> None:
        self.user, self.system = user, system


class ServerThread:
    """One thread of the MariaDB server process, read from /proc/PID/task/TID/stat (a
    psutil.Process look-alike for cpu_of: `pid` is the thread id)."""

    _TICK = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0

    def __init__(self, server_pid: int, tid: int) -> None:
        self.pid = tid
        self._path = Path(f"/proc/{server_pid}/task/{tid}/stat")

    def exists(self) -> bool:
        return self._path.exists()

    def cpu_times(self) -> _Times:
        fields = self._path.read_text().rpartition(")")[2].split()
        return _Times(int(fields[11]) / self._TICK, int(fields[12]) / self._TICK)


def _server_pid() -> int:
    import psutil

    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] in ("mariadbd", "mysqld"):
            return int(proc.pid)
    raise LookupError("no mariadbd process on this host")


class MySQLThreads:
    """The MariaDB server threads serving the connections to the database of `url` (none when
    the server runs elsewhere, or is MySQL: its PROCESSLIST has no TID). A connection may be
    served by a thread from the server's thread cache, which served others before: `baseline`
    gives every server thread's CPU so far, so that such a thread counts from then, not in full."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.db = url.rpartition("/")[2].partition("?")[0]

    def __call__(self) -> list[Any]:
        from bench.dbs import mysql_rows

        try:
            query = "SELECT TID FROM information_schema.PROCESSLIST WHERE DB = %s AND ID <> CONNECTION_ID()"
            rows = mysql_rows(self.url, query, self.db)
            pid = _server_pid()
        except Exception:
            return []
        found = [ServerThread(pid, int(tid)) for (tid,) in rows if tid]
        return [t for t in found if t.exists()]

    def baseline(self, of: Callable[[Sequence[Any]], dict[int, float]] | None = None) -> dict[int, float]:
        """Every server thread's CPU so far (by `of`: cpu_of, or cpu_ns_of)."""
        try:
            pid = _server_pid()
        except Exception:
            return {}
        threads = [ServerThread(pid, int(tid.name)) for tid in Path(f"/proc/{pid}/task").iterdir()]
        return (of or cpu_of)(threads)


def cpu_of(procs_: Sequence[Any]) -> dict[int, float]:
    """pid -> user + system CPU seconds of each process still alive."""
    out = {}
    for proc in procs_:
        with contextlib.suppress(Exception):
            t = proc.cpu_times()
            out[proc.pid] = float(t.user + t.system)
    return out


def cpu_ns_of(procs_: Sequence[Any]) -> dict[int, float]:
    """pid -> CPU seconds of each process (or ServerThread) still alive, from
    /proc/PID/schedstat (nanoseconds; /proc/PID/stat counts in 10 ms ticks, too coarse for a
    backend's share of a short drain). Its main thread only: for the single-threaded
    PostgreSQL backends and the MariaDB server threads that is all."""
    out = {}
    for proc in procs_:
        stat = getattr(proc, "_path", None)
        path = stat.with_name("schedstat") if stat is not None else Path(f"/proc/{proc.pid}/schedstat")
        with contextlib.suppress(OSError, ValueError, IndexError):
            out[proc.pid] = int(path.read_text().split()[0]) / 1e9
    return out


def process_tree(pids: Sequence[int]) -> list[Any]:
    """The processes `pids` and their descendants (psutil.Process objects)."""
    import psutil

    found = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            found += [proc, *proc.children(recursive=True)]
    return found


def _delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU used between two snapshots; a process born in between counts in full."""
    return sum(t - before.get(pid, 0.0) for pid, t in after.items())


class CpuMeter:
    """Worker and PostgreSQL backend CPU between `start` and `stop`, per handled run.

    `start` is called once the first handler has run (interpreter start-up and imports
    stay out of the figure), `stop` once the database shows every run done.
    """

    def __init__(self, backends: Callable[[], list[Any]] | None) -> None:
        self.db = backends  # the database's server processes (or threads) serving the run
        self.started = False
        self._handled = 0
        self._workers: dict[int, float] = {}
        self._backends: dict[int, float] = {}
        self._pids: list[int] = []
        self._t0 = 0.0
        self._procs: list[Any] = []  # workers and backends seen at start
        self._last: dict[int, float] = {}  # their CPU at the latest tick
        self._last_tick = 0.0

    def start(self, worker_pids: Sequence[int], handled: int) -> None:
        self.started = True
        try:
            import psutil  # noqa: F401
        except ImportError:
            return
        self._pids = list(worker_pids)
        backends = self.db() if self.db else []
        workers = process_tree(self._pids)
        self._procs = backends + workers
        baseline = getattr(self.db, "baseline", None)  # MariaDB: threads reused from its cache
        self._backends = {**(baseline() if baseline else {}), **cpu_of(backends)}
        self._workers = cpu_of(workers)
        self._handled = handled
        self._t0 = self._last_tick = time.monotonic()

    def tick(self, every: float = 0.05) -> None:
        """Re-read the known processes now and then, so that one that exits before `stop`
        (a backend whose connection closes, a loop that returns) still counts up to here."""
        now = time.monotonic()
        if self._procs and now - self._last_tick >= every:
            self._last_tick = now
            self._last.update(cpu_of(self._procs))

    def _now(self, procs_: Sequence[Any], known: dict[int, float]) -> dict[int, float]:
        current = cpu_of(procs_)
        gone = {pid: t for pid, t in self._last.items() if pid in known and pid not in current}
        return {**gone, **current}

    def stop(self, handled: int) -> Metrics:
        if not self._pids:
            return {}
        workers = _delta(self._workers, self._now(process_tree(self._pids), self._workers))
        runs, wall = handled - self._handled, time.monotonic() - self._t0
        metrics = {
            "worker_us_per_run": 1e6 * workers / runs if runs > 0 else math.nan,
            "worker_cpu_pct": 100.0 * workers / wall if wall > 0 else math.nan,
        }
        if self.db and self._backends:  # none found: a server on another host
            backends = _delta(self._backends, self._now(self.db(), self._backends))
            metrics["db_us_per_run"] = 1e6 * backends / runs if runs > 0 else math.nan
            metrics["db_cpu_pct"] = 100.0 * backends / wall if wall > 0 else math.nan
        return metrics


def db_name(url: str | None) -> str | None:
    """The database name of a PostgreSQL URL (None for SQLite or no URL)."""
    if not url or not url.startswith("postgres"):
        return None
    return url.rpartition("/")[2].partition("?")[0]


def server_of(url: str | None) -> Callable[[], list[Any]] | None:
    """How to find the server processes (PostgreSQL) or threads (MariaDB) serving the
    database of `url` (None for SQLite or no URL)."""
    name = db_name(url)
    if name is not None:
        return lambda: db_backends(name)
    if url and url.startswith(("mysql", "mariadb")):
        return MySQLThreads(url)
    return None


def memory_mb(pid: int) -> Metrics:
    """Resident memory of one process from /proc: peak (VmHWM) and current (VmRSS), MiB."""
    path = Path(f"/proc/{pid}/status")
    try:
        text = path.read_text()
    except OSError as exc:
        raise Unsupported(f"cannot read {path} (Linux /proc needed for peak RSS): {exc}") from exc
    values = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmHWM", "VmRSS"):
            values[name] = float(rest.split()[0]) / 1024.0  # kB -> MiB
    return {"peak_rss_mb": values["VmHWM"], "rss_mb": values["VmRSS"]}
