"""What one idle MySQL/MariaDB worker costs (issue 42 item 4): a `bench.rota_worker` process on
a scratch `bench_idle_cpu_<pid>` database, 8 s after its start, CPU over `--window` seconds:
the worker process and the MariaDB server threads of its connections (bench/cpu.py's
MySQLThreads; the server must run on this host). `--tick`: with an every-second schedule.

    python -m bench.idle_cpu [--window 30] [--tick] [--mysql-url mysql://root@127.0.0.1:3306/mysql]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import psutil

from bench.cpu import MySQLThreads, cpu_of
from bench.dbs import _mysql_ddl, _with_db
from bench.procs import REPO, child_env


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.idle_cpu", description=__doc__.split("\n")[0])
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--tick", action="store_true")
    parser.add_argument("--mysql-url", default=os.environ.get("BENCH_MYSQL_URL", "mysql://root@127.0.0.1:3306/mysql"))
    args = parser.parse_args()
    name = f"bench_idle_cpu_{os.getpid()}"
    _mysql_ddl(args.mysql_url, f"DROP DATABASE IF EXISTS `{name}`", f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    url = _with_db(args.mysql_url, name)
    env = child_env({"ROTA_DATABASE_URL": url, "BENCH_ROTA_TICK": "1" if args.tick else "0"})
    migrate = "import bench.rota_app as m; m.app.migrate()"
    subprocess.run([sys.executable, "-c", migrate], env=env, cwd=REPO, check=True)
    worker = subprocess.Popen(
        [sys.executable, "-m", "bench.rota_worker", "bench.rota_app"], env=env, cwd=REPO, stderr=subprocess.DEVNULL
    )
    try:
        time.sleep(8.0)  # started, migrated, polled
        process, threads = psutil.Process(worker.pid), MySQLThreads(url)
        server = threads()
        before = {**threads.baseline(), **cpu_of(server)}
        cpu0, began = process.cpu_times(), time.monotonic()
        time.sleep(args.window)
        cpu1, elapsed, after = process.cpu_times(), time.monotonic() - began, cpu_of(server)
    finally:
        worker.terminate()
        worker.wait(10)
        _mysql_ddl(args.mysql_url, f"DROP DATABASE IF EXISTS `{name}`")
    mine = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / elapsed
    theirs = sum(after[tid] - before[tid] for tid in after if tid in before) / elapsed
    print(
        f"{'every-second schedule' if args.tick else 'idle'}, {elapsed:.0f} s: worker {100 * mine:.2f} % of a core, "
        f"MariaDB threads of its {len(server)} connection(s) {100 * theirs:.2f} %"
    )


if __name__ == "__main__":
    main()
