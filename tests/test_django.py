"""rota.contrib.django (issue 44): the pytest-django fixture and the Tasks backend, run with
pytest-django for real on the project under tests/django_project (in a subprocess: the rota
suite itself runs with -p no:django); the rota CLI and the management commands with Django."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import rota
from rota.contrib.django import url_of
from rota.errors import ConfigurationError
from rota.stores.mysql.session import connect_kwargs

from . import mysql_db
from .conftest import MYSQL_URL, PG_URL, WITH_MYSQL, require, require_module, store_url
from .test_examples import DJANGO, django_env, env_with, manage, manage_worker, stop
from .test_testing_plugin import plugin_args
from .test_txn import MYSQLCLIENT

PROJECT = Path(__file__).resolve().parent / "django_project"
pytest.importorskip("django")
pytest.importorskip("pytest_django")


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The example project (examples/django_project) on each store; on MySQL through
    mysqlclient, Django's MySQL driver."""
    yield from store_url(request, tmp_path)


@pytest.mark.parametrize(
    "store",
    [
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", marks=pytest.mark.mysql),  # mysqlclient: Django's MySQL driver
        pytest.param("mysql-pymysql", marks=pytest.mark.mysql),  # PyMySQL installed as MySQLdb
    ],
)
def test_the_fixture_and_the_backend_under_pytest_django(store: str, tmp_path: Path) -> None:
    with django_project_env(store, tmp_path) as env:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", *plugin_args()],
            cwd=PROJECT, env=env, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "8 passed" in done.stdout
    # a handler's thread closes its Django connections (PostgreSQL could not drop the test database)
    assert "Error when trying to teardown" not in done.stdout, done.stdout[-3000:]


@contextlib.contextmanager
def django_project_env(store: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of the test project on `store`; Django's test database is dropped
    afterwards (pytest-django drops it already unless the run failed)."""
    with contextlib.ExitStack() as stack:
        if store == "sqlite":
            env = env_with(DATABASE_URL=f"sqlite:///{tmp_path}/db.sqlite3")
        elif store == "postgres":
            require("postgres")
            test_database = f"test_rota_{uuid.uuid4().hex[:10]}"
            env = env_with(DATABASE_URL=PG_URL, DJANGO_TEST_DATABASE=test_database)
            stack.callback(_drop_postgres_database, test_database)
        else:
            require("mysql")
            driver = "pymysql" if store == "mysql-pymysql" else "mysqlclient"
            if driver == "mysqlclient":
                require_module("MySQLdb", MYSQLCLIENT)
            url = stack.enter_context(mysql_db.database(MYSQL_URL))
            test_database = f"{mysql_db.PREFIX}{uuid.uuid4().hex[:12]}"  # a name the tests' user may create
            env = env_with(DATABASE_URL=url, DJANGO_TEST_DATABASE=test_database, DJANGO_MYSQL_DRIVER=driver)
            stack.callback(_drop_mysql_database, test_database)
        env["PYTHONPATH"] += f":{PROJECT}"
        yield env


def _drop_postgres_database(name: str) -> None:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _drop_mysql_database(name: str) -> None:
    conn = mysql_db.admin(MYSQL_URL)
    with contextlib.closing(conn), conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


def test_the_rota_cli_without_django_settings_says_so_in_one_line() -> None:
    env = env_with()
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, "-m", "rota", "worker", "shop.tasks:app"],
        cwd=DJANGO, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "DJANGO_SETTINGS_MODULE is not set" in lines[0], done.stderr
    env["DJANGO_SETTINGS_MODULE"] = "nosuch.settings"
    done = subprocess.run(
        [sys.executable, "-m", "rota", "dashboard", "shop.tasks:app"],
        cwd=DJANGO, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert (
        done.stderr == "error: DJANGO_SETTINGS_MODULE=nosuch.settings: cannot set Django up: No module named 'nosuch'\n"
    )


def test_the_rota_cli_sets_django_up_for_orm_tasks_and_the_tasks_backend(db_url: str) -> None:
    manage(db_url, "migrate", "-v", "0")
    enqueue = (
        "from shop.models import Order; from shop.tasks import send_receipt, summary; "
        "o = Order.objects.create(email='ada@example.com'); print(send_receipt.enqueue(o.id).id, summary.enqueue().id)"
    )
    receipt, summary = manage(db_url, "shell", "-v", "0", "-c", enqueue).split()
    env = django_env(db_url)
    command = [sys.executable, "-m", "rota", "worker", "shop.tasks:app", "--poll-interval", "0.1"]
    worker = subprocess.Popen(command, cwd=DJANGO, env=env, stderr=subprocess.PIPE, text=True)
    try:
        app = rota.App(db_url)
        assert rota.RunHandle(app, receipt).wait(60).status == "succeeded"  # AppRegistryNotReady before
        assert rota.RunHandle(app, summary).wait(60).result == 1
        app.close()
    finally:
        stop(worker)
    check = f"from shop.tasks import summary; r = summary.get_result('{summary}'); print(r.status, r.return_value)"
    assert manage(db_url, "shell", "-v", "0", "-c", check).split() == ["SUCCESSFUL", "1"]


def test_manage_rota_runs_the_read_only_commands(db_url: str) -> None:
    manage(db_url, "migrate", "-v", "0")
    manage(db_url, "rota_migrate")
    run_id = manage(db_url, "shell", "-v", "0", "-c", "from shop.tasks import summary; print(summary.enqueue().id)")
    worker = manage_worker(db_url)
    try:
        app = rota.App(db_url)
        assert rota.RunHandle(app, run_id.strip()).wait(60).status == "succeeded"
        app.close()
    finally:
        assert "1 schedule(s)" in stop(worker)  # the TASKS schedule, declared for the worker
    assert "daily-summary" in manage(db_url, "rota", "schedules")


def test_urls_of_django_databases() -> None:
    assert url_of({"ENGINE": "django.db.backends.sqlite3", "NAME": "/srv/db.sqlite3"}) == "sqlite:////srv/db.sqlite3"
    pg = {"ENGINE": "django.db.backends.postgresql", "NAME": "shop", "USER": "app", "PASSWORD": "p@ss",
          "HOST": "db", "PORT": 5432, "OPTIONS": {"sslmode": "require", "pool": True}}  # fmt: skip
    assert url_of(pg) == "postgresql://app:p%40ss@db:5432/shop?sslmode=require"
    with pytest.raises(ConfigurationError, match="in memory"):
        url_of({"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"})
    my = {"ENGINE": "django.db.backends.mysql", "NAME": "shop", "USER": "app", "PASSWORD": "p@ss", "HOST": "db",
          "PORT": "3307", "OPTIONS": {"charset": "utf8mb4", "ssl": {"ca": "/etc/ca.pem"}}}  # fmt: skip
    assert url_of(my) == "mysql://app:p%40ss@db:3307/shop?ssl_ca=%2Fetc%2Fca.pem"  # refused before 0.x
    socket_only = {"ENGINE": "django.db.backends.mysql", "NAME": "shop", "HOST": "/run/mysqld/mysqld.sock"}
    assert url_of(socket_only) == "mysql://localhost/shop?unix_socket=%2Frun%2Fmysqld%2Fmysqld.sock"
    assert connect_kwargs(url_of(socket_only), 5, 5)["unix_socket"] == "/run/mysqld/mysqld.sock"  # the store takes it
    with pytest.raises(ConfigurationError, match="read_default_file.*ROTA\\['DATABASE_URL'\\]"):
        url_of({"ENGINE": "django.db.backends.mysql", "NAME": "shop", "OPTIONS": {"read_default_file": "/etc/my.cnf"}})
    with pytest.raises(ConfigurationError, match="ROTA\\['DATABASE_URL'\\]"):
        url_of({"ENGINE": "django.db.backends.oracle", "NAME": "shop"})


def test_manage_rota_dashboard_serves_the_projects_database(db_url: str) -> None:
    pytest.importorskip("starlette")
    manage(db_url, "migrate", "-v", "0")
    manage(db_url, "rota_migrate")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = django_env(db_url)
    command = [sys.executable, "manage.py", "rota_dashboard", "--port", str(port)]
    dashboard = subprocess.Popen(command, cwd=DJANGO, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/stats", timeout=5) as response:
                    stats = json.load(response)
                break
            except OSError:
                assert time.monotonic() < deadline and dashboard.poll() is None, "the dashboard did not start"
                time.sleep(0.2)
        assert stats["runs"]["pending"] == 0
    finally:
        stderr = stop(dashboard)
    assert "Application startup complete" in stderr  # its lines are logged at info
