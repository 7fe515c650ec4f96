"""Server and client CPU of the MySQL/MariaDB store's claim and finish, without a worker.

Enqueues N no-op runs in a scratch database (tests/mysql_db.py: ROTA_TEST_MYSQL_URL, default
root on 127.0.0.1), then claims 100 and finishes the previous 100 in a loop on one thread,
and prints: the rate, the client's CPU per run, the whole MariaDB process's CPU per run (other
sessions on the server count too) and the CPU of the store's own connection threads
(information_schema.PROCESSLIST.TID, /proc: this loop's statements only). `--profile`: the
client's functions by own time (cProfile). `--statements`: each named query's wall time per run
(its round trip, the server's work and the client's decoding of its rows) and the server's
`SHOW GLOBAL STATUS` counters per run (Handler_*, Innodb_rows_*: other sessions count too).
The server must run on this machine (its /proc). Run from the repository root, beside another
checkout for an A/B (on a shared machine, alternate the two and compare medians):

    PYTHONPATH=$PWD python -m bench.profile_mysql_claims [--runs 10000] [--profile] [--statements]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import os
import pstats
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import rota
from rota.stores.mysql import session as mysql_session
from rota.stores.records import Outcome
from tests import mysql_db

ADMIN = os.environ.get("ROTA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/mysql")
STATUS = (
    "SHOW GLOBAL STATUS WHERE Variable_name LIKE 'Handler%%' OR Variable_name LIKE 'Innodb_rows%%'"
    " OR Variable_name IN ('Questions', 'Com_select', 'Com_update', 'Com_commit', 'Innodb_data_fsyncs')"
)


def _ticks(path: str) -> float:
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def statement_times() -> Iterator[dict[str, list[float]]]:
    """Each named query's statements timed (its name and first word: [count, seconds])."""
    times: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    named = threading.local()
    q, execute = mysql_session.Session.q, mysql_session.Session._execute

    def timed_q(self: Any, name: str, /, **params: Any) -> Any:
        named.name = name
        return q(self, name, **params)

    def timed_execute(self: Any, sql: str, params: dict[str, Any]) -> None:
        t = time.perf_counter()
        execute(self, sql, params)
        entry = times[f"{getattr(named, 'name', '?')} ({sql.split(None, 1)[0]})"]
        entry[0] += 1
        entry[1] += time.perf_counter() - t

    mysql_session.Session.q, mysql_session.Session._execute = timed_q, timed_execute  # type: ignore[method-assign]
    try:
        yield times
    finally:
        mysql_session.Session.q, mysql_session.Session._execute = q, execute  # type: ignore[method-assign]


def server_status(store: Any) -> dict[str, int]:
    with store._read() as s:
        return {str(r[0]): int(r[1]) for r in s.q_text(STATUS)}


def print_statements(times: dict[str, list[float]], before: dict[str, int], after: dict[str, int], done: int) -> None:
    for name, (n, seconds) in sorted(times.items(), key=lambda kv: -kv[1][1]):
        print(f"  {name:40s} {n:6.0f} statements {1e6 * seconds / done:7.1f} µs/run {1e6 * seconds / n:8.0f} µs each")
    for key in sorted(after):
        if after[key] != before.get(key, 0):
            print(f"  {key:32s} {(after[key] - before.get(key, 0)) / done:8.2f} /run")


def drain(store: Any) -> int:
    """Claims 100 and finishes the previous 100 until none are left: the runs finished."""
    done, outcomes = 0, []
    while True:
        claimed = store.claim("w", 100, None, 30.0)
        if not claimed and not outcomes:
            return done
        if outcomes:
            store.finish(outcomes)
            done += len(outcomes)
        outcomes = [Outcome(c.id, c.token, "succeeded", result="null") for c in claimed]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--statements", action="store_true")
    args = parser.parse_args()
    server = subprocess.check_output(["pgrep", "-x", "mariadbd|mysqld"]).split()[0].decode()
    with mysql_db.database(ADMIN) as url:
        app = rota.App(url, retention=None)
        app.migrate()
        task = app.task(name="t")(lambda: None)
        for _ in range(args.runs):
            task.enqueue()
        store: Any = app.store
        if hasattr(store, "_take_tokens"):
            store._take_tokens(1)  # its connection open before the count
        with store._read() as s:
            tids = [r[0] for r in s.q_text("SELECT TID FROM information_schema.PROCESSLIST WHERE DB = DATABASE()")]

        def threads() -> float:
            return sum(_ticks(f"/proc/{server}/task/{tid}/stat") for tid in tids)

        profile = cProfile.Profile() if args.profile else None
        status = server_status(store) if args.statements else {}
        c0, s0, h0, t0 = time.process_time(), _ticks(f"/proc/{server}/stat"), threads(), time.perf_counter()
        with statement_times() if args.statements else contextlib.nullcontext({}) as times:
            if profile is not None:
                profile.enable()
            done = drain(store)
            if profile is not None:
                profile.disable()
        c1, s1, h1, t1 = time.process_time(), _ticks(f"/proc/{server}/stat"), threads(), time.perf_counter()
        us = 1e6 / done
        print(
            f"runs {done}: {done / (t1 - t0):,.0f}/s, client CPU {us * (c1 - c0):.0f} µs/run, server process "
            f"{us * (s1 - s0):.0f} µs/run, the store's connection threads ({len(tids)}) {us * (h1 - h0):.0f} µs/run"
        )
        if profile is not None:
            pstats.Stats(profile).sort_stats("tottime").print_stats(18)
        if args.statements:
            print_statements(times, status, server_status(store), done)
        app.close()


if __name__ == "__main__":
    main()
