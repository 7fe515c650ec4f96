"""What the numbers were measured on."""

from __future__ import annotations

import datetime as dt
import os
import platform
import sqlite3
import subprocess
from importlib import metadata
from typing import Any

from bench import dbs
from bench.procs import REPO

PACKAGES = (
    "rota",
    "psycopg",
    "psycopg-pool",
    "pgqueuer",
    "asyncpg",
    "uvloop",
    "procrastinate",
    "huey",
    "psutil",
    "PyMySQL",
)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        import psutil

        return round(float(psutil.virtual_memory().total) / 2**30, 1)
    except ImportError:
        return None


def _versions() -> dict[str, str]:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def _postgres(url: str) -> dict[str, str] | str:
    try:
        return dbs.pg_server_info(url)
    except Exception as exc:
        return f"unavailable ({type(exc).__name__})"


def _mysql(url: str) -> dict[str, str] | str:
    try:
        return dbs.mysql_server_info(url)
    except Exception as exc:
        return f"unavailable ({type(exc).__name__})"


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def describe(pg_url: str, mysql_url: str | None = None) -> dict[str, Any]:
    return {
        "load_average": load_average(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_gib": _memory_gib(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "postgres": _postgres(pg_url),
        "mysql": _mysql(mysql_url) if mysql_url else "not asked",
        "packages": _versions(),
        "git_commit": _git_commit(),
    }


def one_line(info: dict[str, Any]) -> str:
    pg = info["postgres"]
    pg_text = (
        f"PostgreSQL {pg['server_version']} (fsync={pg['fsync']}, synchronous_commit={pg['synchronous_commit']})"
        if isinstance(pg, dict)
        else f"PostgreSQL {pg}"
    )
    my = info.get("mysql")
    my_text = (
        f", MariaDB/MySQL {my['version']} (innodb_flush_log_at_trx_commit={my['innodb_flush_log_at_trx_commit']}, "
        f"log_bin={my['log_bin']})"
        if isinstance(my, dict)
        else ""
    )
    return (
        f"{info['cpu_count']} CPUs ({info['cpu_model']}), {info['memory_gib']} GiB, "
        f"{pg_text}{my_text}, SQLite {info['sqlite']}, Python {info['python']}, "
        f"commit {info['git_commit']}"
    )
