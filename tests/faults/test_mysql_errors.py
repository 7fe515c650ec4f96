"""Which MySQL/MariaDB errors are passing ones (rota.DatabaseTransient: leases kept, the call
tried again) and which are an outage (DatabaseUnavailable: the worker waits it out, also
while it starts), as PostgreSQL's are: a statement interrupted by KILL QUERY or by a time
limit, a connection limit reached, a server shutting down; a connection cut or killed."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pymysql
import pytest

import rota
from rota.errors import DatabaseError, DatabaseTransient, DatabaseUnavailable
from rota.stores.base import NewRun
from rota.stores.mysql.session import translate

from .. import mysql_db
from ..conftest import MYSQL, MYSQL_URL, make_app, store_url
from ..procs import WorkerProcs, wait_until

# A query that reads for seconds, on any server (no table of rota's, no SLEEP: SLEEP and
# BENCHMARK return normally when interrupted).
HEAVY = (
    "SELECT COUNT(*) FROM information_schema.collations a, information_schema.collations b, "
    "information_schema.collations c, information_schema.collations d"
)


@pytest.fixture(params=[MYSQL])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from store_url(request, tmp_path)


def _interrupted(app: rota.App, statement: str, kill: bool) -> None:
    """Run `statement` through the store; KILL QUERY ends it 0.3 s later (`kill`), else it
    ends by itself (a time limit). What it raises is the store's translation."""
    store: Any = app.store
    with store._read() as s:
        if kill:
            threading.Timer(0.3, mysql_db.kill_query, (MYSQL_URL, s.conn.thread_id())).start()
        s.q_text(statement)
    raise AssertionError(f"{statement!r} was not interrupted")  # pragma: no cover


@pytest.mark.parametrize("how", ["kill-query", "max-statement-time"])
def test_an_interrupted_statement_is_transient(db_url: str, how: str) -> None:
    """KILL QUERY (1317: an operator ending a blocked statement) and a statement time limit
    (MariaDB's max_statement_time 1969, MySQL's max_execution_time 3024) end the statement,
    not the session: try again, like PostgreSQL's statement timeout and cancel (57014)."""
    app = make_app(db_url)
    try:
        app.prepare()
        statement = HEAVY if how == "kill-query" else f"SET STATEMENT max_statement_time=0.2 FOR {HEAVY}"
        with pytest.raises(DatabaseTransient, match="interrupted") as info:
            _interrupted(app, statement, kill=how == "kill-query")
        assert not isinstance(info.value, DatabaseUnavailable)
        assert app.store.count_by_status() == {}  # the session goes on
    finally:
        app.close()


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (1040, DatabaseUnavailable),  # Too many connections
        (1203, DatabaseUnavailable),  # the account's max_user_connections
        (1226, DatabaseUnavailable),  # the account's max_queries_per_hour and the like
        (1053, DatabaseUnavailable),  # Server shutdown in progress
        (1927, DatabaseUnavailable),  # Connection was killed (MariaDB)
        (2013, DatabaseUnavailable),  # Lost connection during query
        (1213, DatabaseTransient),  # deadlock
        (1205, DatabaseTransient),  # lock wait timeout
        (1637, DatabaseTransient),  # Too many active concurrent transactions
        (3024, DatabaseTransient),  # MySQL's max_execution_time
        (1146, DatabaseError),  # no such table: not a passing error
    ],
)
def test_the_server_errors_are_classified_as_postgresqls(code: int, kind: type[DatabaseError]) -> None:
    error = translate(pymysql.err.OperationalError(code, "the server's message"), MYSQL_URL)
    assert type(error) is kind


def test_a_worker_started_at_its_accounts_connection_limit_waits_for_a_free_one(db_url: str, tmp_path: Path) -> None:
    """An account at its connection limit (its MAX_USER_CONNECTIONS: 1226; the server's
    max_user_connections: 1203; max_connections: 1040) is an outage for a worker that starts, as PostgreSQL's "too many
    clients" is: it waits with one warning, starts once a connection is free and runs."""
    name = f"rota_t_lim_{uuid.uuid4().hex[:8]}"
    database = urlsplit(db_url).path.lstrip("/")
    admin = mysql_db.admin(MYSQL_URL)
    held: list[Any] = []
    procs = WorkerProcs(db_url.replace("rota_test:rota_test", f"{name}:{name}"), tmp_path)
    try:
        with admin.cursor() as cur:
            for host in ("%", "localhost"):
                cur.execute(f"CREATE USER '{name}'@'{host}' IDENTIFIED BY '{name}' WITH MAX_USER_CONNECTIONS 12")
                cur.execute(f"GRANT ALL PRIVILEGES ON `{database}`.* TO '{name}'@'{host}'")
        client = make_app(db_url)
        client.prepare()
        parts = urlsplit(procs.url)
        while True:  # take every connection the account may have
            try:
                held.append(pymysql.connect(host=parts.hostname, port=parts.port, user=name, password=name))
            except pymysql.err.OperationalError as exc:
                assert exc.args[0] in (1203, 1226), exc  # the server's limit, the account's
                break
        proc = procs.start(concurrency=2, lease=2.0)
        waits = "retries with backoff until it can start"
        wait_until(lambda: waits in procs.output(0) or proc.poll() is not None, 30, "the warning or an exit")
        time.sleep(0.5)
        assert proc.poll() is None, procs.output(0)[-3000:]
        for conn in held:
            conn.close()
        held.clear()
        ((run_id, _),) = client.store.insert_runs([NewRun(task="noop", args="[1]")])
        wait_until(lambda: client.get_run(run_id).status == "succeeded", 30, "the run to succeed")
        assert proc.poll() is None and "database is back" in procs.output(0)
        client.close()
    finally:
        for conn in held:
            conn.close()
        procs.stop_all()
        with admin.cursor() as cur:
            for host in ("%", "localhost"):
                cur.execute(f"DROP USER IF EXISTS '{name}'@'{host}'")
        admin.close()


def test_a_migration_cut_short_before_its_version_was_recorded_runs_again(db_url: str) -> None:
    """DDL commits at once on MySQL: a migration cut short (its connection cut, the server
    restarted, its process killed) leaves its first statements applied and its version
    unrecorded. The next start runs it again and passes over what is already there (a
    worker that started while its connections were cut exited on "Table ... already exists")."""
    from rota.stores.mysql.migrate import statements
    from rota.stores.sqlstore.queries import latest_version, load_migrations

    migrations = load_migrations("mysql")
    made = list(statements(migrations[0].sql))
    for statement in made[: len(made) - 2]:  # every table and row, not its last triggers
        mysql_db.execute(db_url, statement)
    app = make_app(db_url)
    try:
        assert app.migrate()[0] == f"0001_{migrations[0].name}"
        latest = latest_version(migrations)
        assert app.store.schema_version() == (latest, latest)  # type: ignore[attr-defined]
        ((run_id, _),) = app.store.insert_runs([NewRun(task="noop")])
        assert app.get_run(run_id).status == "pending"
    finally:
        app.close()


def test_sessions_are_bounded_and_keepalives_set(db_url: str) -> None:
    """As the PostgreSQL store's: TCP keepalives notice a dead peer in about 20 s; on MariaDB a
    session idle in a transaction for 60 s is ended (a frozen host's claim holding the token
    counter held every claim for wait_timeout, 8 hours), a tick's transaction after 1 s, and
    the session's settings are put back after the tick."""
    import socket

    app = make_app(db_url)
    try:
        store: Any = app.store
        with store._read() as s:
            sock = s.conn._sock
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 10
            maria = "MariaDB" in s.q_text("SELECT VERSION()")[0][0]
            idle = "idle_transaction_timeout" if maria else "wait_timeout"
            before = s.q_text(f"SELECT @@SESSION.{idle}, @@SESSION.innodb_lock_wait_timeout")[0]
        if maria:
            assert before == (60, 5)
        with store._tx() as s:
            store._bound_tick_locks(s)
            during = s.q_text(f"SELECT @@SESSION.{idle}, @@SESSION.innodb_lock_wait_timeout")[0]
            conn = s.conn
        assert during == ((1, 1) if maria else (before[0], 1))
        with store._read() as s:
            assert s.conn is conn  # the same pooled session, its settings put back
            assert s.q_text(f"SELECT @@SESSION.{idle}, @@SESSION.innodb_lock_wait_timeout")[0] == before
    finally:
        app.close()
