"""The permission probe at boot (issue 14 item 3): a worker and `rota migrate` refuse to start
on a database they cannot write, naming the missing privilege and the table."""

from __future__ import annotations

import asyncio
import os
import stat
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest
from click.testing import CliRunner

import rota
from rota.cli import main as cli
from rota.stores.sqlstore.queries import load_migrations

from .conftest import PG_URL, make_app


@pytest.fixture
def limited_role(pg_url: str) -> Iterator[tuple[str, str]]:
    """(URL of a new role that may only SELECT in the test's schema, the role's name)."""
    import psycopg

    schema = unquote(pg_url).split("search_path=", 1)[1].split("&", 1)[0]
    role = f"operate_store_ro_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
    try:
        yield pg_url.replace("://postgres@", f"://{role}@", 1), role
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


def _grant(sql: str, role: str, schema_url: str) -> None:
    import psycopg

    schema = unquote(schema_url).split("search_path=", 1)[1].split("&", 1)[0]
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(sql.format(schema=f'"{schema}"', role=f'"{role}"'))


def _migrate_and_grant_everything(role: str, pg_url: str) -> None:
    """The schema migrated by its owner; `role` granted every table, view and sequence."""
    owner = make_app(pg_url)
    owner.migrate()
    owner.close()
    _grant("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}", role, pg_url)
    _grant("GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {role}", role, pg_url)


@pytest.mark.postgres
def test_a_select_only_role_is_refused_naming_the_privilege_and_the_table(
    pg_url: str, limited_role: tuple[str, str]
) -> None:
    url, role = limited_role
    owner = make_app(pg_url)
    owner.migrate()
    owner.close()
    _grant("GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}", role, pg_url)
    app = make_app(url)
    try:
        assert app.list_runs() == []  # reading is fine
        expected = rf"database role '{role}' lacks INSERT on rota_runs, UPDATE on rota_runs, DELETE on rota_runs"
        with pytest.raises(rota.PermissionDenied, match=expected) as caught:
            app.prepare()
        assert "USAGE on rota_run_id_seq" in str(caught.value) and "GRANT SELECT, INSERT" in str(caught.value)
        worker = app.worker(install_signal_handlers=False)
        with pytest.raises(rota.PermissionDenied, match=expected):
            asyncio.run(worker.run())
        result = CliRunner().invoke(cli, ["--database-url", url, "migrate"])
        assert result.exit_code != 0
        assert f"database role '{role}' lacks INSERT on rota_runs" in result.output
        assert "Traceback" not in result.output
    finally:
        app.close()


@pytest.mark.postgres
def test_a_read_only_role_with_every_privilege_is_caught_by_the_write_probe(
    pg_url: str, limited_role: tuple[str, str]
) -> None:
    url, role = limited_role
    _migrate_and_grant_everything(role, pg_url)
    _grant("ALTER ROLE {role} SET default_transaction_read_only = on", role, pg_url)
    app = make_app(url)
    try:
        with pytest.raises(
            rota.PermissionDenied, match=r"cannot INSERT rota_runs, which rota needs: .*read-only transaction"
        ):
            app.prepare()
    finally:
        app.close()
    _grant("ALTER ROLE {role} RESET default_transaction_read_only", role, pg_url)
    app = make_app(url)
    try:
        app.prepare()  # every write allowed: starts
        assert app.list_runs() == [] and app.store.count_by_status() == {}  # the probe left nothing
    finally:
        app.close()


@pytest.mark.postgres
def test_a_role_without_write_on_the_flow_tables_is_refused_naming_them(
    pg_url: str, limited_role: tuple[str, str]
) -> None:
    url, role = limited_role
    _migrate_and_grant_everything(role, pg_url)
    _grant("REVOKE INSERT, UPDATE, DELETE ON {schema}.rota_task_flow, {schema}.rota_limits FROM {role}", role, pg_url)
    app = make_app(url)
    try:
        with pytest.raises(rota.PermissionDenied, match=r"lacks INSERT on rota_limits, .*DELETE on rota_task_flow"):
            app.prepare()  # not a raw error when the worker stores its limits
    finally:
        app.close()


@pytest.mark.postgres
def test_a_role_that_cannot_read_the_view_of_every_run_is_refused_naming_it(
    pg_url: str, limited_role: tuple[str, str]
) -> None:
    """Tables granted one by one, the view `rota_runs_all` forgotten: the worker would start
    and then fail on every read of a final run (listings, retries, `after=`, pruning)."""
    url, role = limited_role
    _migrate_and_grant_everything(role, pg_url)
    _grant("REVOKE SELECT ON {schema}.rota_runs_all FROM {role}", role, pg_url)
    app = make_app(url)
    try:
        with pytest.raises(rota.PermissionDenied, match=rf"role '{role}' lacks SELECT on rota_runs_all \("):
            app.prepare()
    finally:
        app.close()


@pytest.mark.postgres
def test_migrate_without_create_on_the_schema_names_it(pg_url: str, limited_role: tuple[str, str]) -> None:
    url, role = limited_role
    result = CliRunner().invoke(cli, ["--database-url", url, "migrate"])
    assert result.exit_code != 0
    assert f"database role '{role}' lacks CREATE on schema" in result.output
    assert "0001_initial" in result.output and "Traceback" not in result.output


@pytest.mark.postgres
def test_migrate_into_a_schema_that_does_not_exist_says_so(pg_url: str) -> None:
    """Not "lacks CREATE on schema None" (a superuser was told it lacked a privilege)."""
    url = pg_url.split("?")[0] + "?options=-csearch_path%3Drota_no_such_schema"
    result = CliRunner().invoke(cli, ["--database-url", url, "migrate"])
    assert result.exit_code == 1
    assert "no schema of the search_path 'rota_no_such_schema' exists" in result.output
    assert "None" not in result.output and "Traceback" not in result.output


def test_the_probe_leaves_no_trace_and_a_writable_store_starts(app: rota.App) -> None:
    app.prepare()
    app.store.check_writable()
    assert app.list_runs() == [] and app.list_schedules() == [] and app.list_locks() == []
    assert app.stats()["runs"]["pending"] == 0


def _as_nobody(fn: object) -> tuple[int, str]:
    """Run `fn` in a forked child as user nobody (root writes read-only files regardless)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code, message = 0, "ok"
        try:
            os.setgid(65534)
            os.setuid(65534)
            fn()  # type: ignore[operator]
        except BaseException as exc:
            code, message = 1, f"{type(exc).__name__}: {exc}"
        os.write(write, message.encode())
        os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        message = pipe.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), message


def test_a_read_only_sqlite_file_gives_a_clear_error() -> None:
    folder = Path(tempfile.mkdtemp(prefix="operate-store-", dir="/tmp"))
    try:
        folder.chmod(0o777)
        path = folder / "rota.db"
        owner = rota.App(f"sqlite:///{path}")
        owner.migrate()
        owner.close()
        path.chmod(0o444)
        app = rota.App(f"sqlite:///{path}")
        if os.geteuid() == 0:
            # rota's own SQL read here, as root: the checkout may be unreadable by nobody
            load_migrations("sqlite")
            app.store  # noqa: B018 - its named queries
            code, message = _as_nobody(app.prepare)
        else:
            code, message = 1, ""
            try:
                app.prepare()
            except rota.PermissionDenied as exc:
                message = f"PermissionDenied: {exc}"
        assert code == 1, message
        assert message.startswith("PermissionDenied: cannot write the SQLite database"), message
        assert "the file is read-only for user" in message and "(mode -r--r--r--)" in message
        result = CliRunner().invoke(cli, ["--database-url", f"sqlite:///{path}", "migrate"])
        if os.geteuid() != 0:
            assert result.exit_code != 0 and "read-only" in result.output
    finally:
        for child in folder.iterdir():
            child.chmod(stat.S_IWUSR | stat.S_IRUSR)
            child.unlink()
        folder.rmdir()
