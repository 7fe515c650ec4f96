"""Server and client CPU of the MySQL/MariaDB store's claim and finish, without a worker.

Enqueues N no-op runs in a scratch database (tests/mysql_db.py: ROTA_TEST_MYSQL_URL, default
root on 127.0.0.1), then claims 100 and finishes the previous 100 in a loop on one thread,
and prints: the rate, the client's CPU per run, the whole MariaDB process's CPU per run (other
sessions on the server count too) and the CPU of the store's own connection threads
(information_schema.PROCESSLIST.TID, /proc: this loop's statements only). `--profile`: the
client's functions by own time (cProfile). The server must run on this machine (its /proc).
Run from the repository root, beside another checkout for an A/B:

    PYTHONPATH=$PWD python -m bench.profile_mysql_claims [--runs 10000] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import subprocess
import time
from pathlib import Path
from typing import Any

import rota
from rota.stores.records import Outcome
from tests import mysql_db

ADMIN = os.environ.get("ROTA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/mysql")


def _ticks(path: str) -> float:
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--profile", action="store_true")
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
        c0, s0, h0, t0 = time.process_time(), _ticks(f"/proc/{server}/stat"), threads(), time.perf_counter()
        if profile is not None:
            profile.enable()
        done, outcomes = 0, []
        while True:
            claimed = store.claim("w", 100, None, 30.0)
            if not claimed and not outcomes:
                break
            if outcomes:
                store.finish(outcomes)
                done += len(outcomes)
            outcomes = [Outcome(c.id, c.token, "succeeded", result="null") for c in claimed]
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
        app.close()


if __name__ == "__main__":
    main()
