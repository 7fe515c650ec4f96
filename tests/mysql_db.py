"""A MySQL/MariaDB database of its own for each test: made by the admin account
(ROTA_TEST_MYSQL_URL, root on this machine), used through a test user that may touch only
the tests' databases (rota_test, password rota_test), dropped afterwards."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote, urlparse

USER, PASSWORD = "rota_test", "rota_test"
PREFIX = "rota_t_"


def _parts(url: str) -> dict[str, Any]:
    parsed = urlparse(url)
    return {
        "host": parsed.hostname or "127.0.0.1",
        "port": parsed.port or 3306,
        "user": unquote(parsed.username or "root"),
        "password": unquote(parsed.password or ""),
    }


def admin(url: str) -> Any:
    import pymysql

    return pymysql.connect(**_parts(url), connect_timeout=3, autocommit=True)


def ensure_user(conn: Any) -> None:
    """The tests' user, allowed everything on the tests' databases only (their names start
    with rota_t_), from any host (the fault suites reach the server through a proxy)."""
    with conn.cursor() as cur:
        for host in ("%", "localhost"):
            cur.execute(f"CREATE USER IF NOT EXISTS '{USER}'@'{host}' IDENTIFIED BY '{PASSWORD}'")
            cur.execute(f"GRANT ALL PRIVILEGES ON `rota\\_t\\_%`.* TO '{USER}'@'{host}'")


@contextlib.contextmanager
def database(url: str) -> Iterator[str]:
    """A new empty database; yields the URL of the test user on it. Dropped afterwards."""
    name = f"{PREFIX}{uuid.uuid4().hex[:12]}"
    parts = _parts(url)
    conn = admin(url)
    try:
        ensure_user(conn)
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    finally:
        conn.close()
    try:
        yield f"mysql://{USER}:{PASSWORD}@{parts['host']}:{parts['port']}/{name}"
    finally:
        conn = admin(url)
        try:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        finally:
            conn.close()


# A time no API writes that DATETIME(6) can still hold when a client's sql_mode allows it (a
# hand edit, an old client, a dump restored without strict mode): the zero date.
ZERO_DATE = "'0000-00-00 00:00:00'"


def execute(url: str, sql: str) -> None:
    """Run `sql` on the test database at `url` (a mysql:// URL from database()) as a hand edit
    would: autocommit, without strict mode, so it may leave values rota never writes."""
    import pymysql

    parsed = urlparse(url)
    conn = pymysql.connect(**_parts(url), database=parsed.path.lstrip("/"), autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = ''")
            cur.execute(sql)
    finally:
        conn.close()


def kill_sessions(url: str, database: str | None = None, ports: set[int] | None = None) -> int:
    """End sessions from the server's side (KILL CONNECTION), as a restart or a failover ends
    them: those on `database`, or those whose client port is in `ports` (the connections a
    fault proxy made), never the admin's own. How many were ended."""
    import pymysql

    conn = admin(url)
    ended = 0
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id, host, db FROM information_schema.processlist WHERE id <> CONNECTION_ID()")
            for session, host, db in cur.fetchall():
                port = str(host).rpartition(":")[2]
                if (database is not None and db == database) or (ports and port.isdigit() and int(port) in ports):
                    try:
                        cur.execute(f"KILL CONNECTION {int(session)}")
                        ended += 1
                    except pymysql.err.OperationalError:  # (1094: it ended meanwhile)
                        pass
    finally:
        conn.close()
    return ended


def kill_query(url: str, session: int) -> None:
    """End the statement session `session` runs (KILL QUERY), not the session."""
    conn = admin(url)
    try:
        with conn.cursor() as cur:
            cur.execute(f"KILL QUERY {int(session)}")
    finally:
        conn.close()
