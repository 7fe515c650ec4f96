"""The pytest plugin, used the way a user would: a tiny shop app and its own tests."""

from __future__ import annotations

import sys
from importlib.metadata import entry_points
from typing import Any

import pytest

pytest_plugins = ("pytester",)

SHOP = """
from datetime import timedelta

import rota

app = rota.App("sqlite:///shop.db")  # production settings; tests bind it to a temporary file
CLEANED = []


@app.task(name="shop.send_receipt", retries=2)
def send_receipt(order_id: int, email: str) -> str:
    return f"receipt {order_id} sent to {email}"


@app.task(name="shop.charge", pass_context=True)
async def charge(ctx: rota.RunContext, order_id: int) -> dict:
    return {"order": order_id, "attempt": ctx.attempt, "of": ctx.max_attempts}


@app.schedule(every=timedelta(minutes=5), name="shop.cleanup")
def cleanup() -> None:
    CLEANED.append(1)


def place_order(order_id: int, email: str) -> None:
    send_receipt.enqueue(order_id, email)
"""

CONFTEST = """
import pytest

import shop


@pytest.fixture
def rota_app(rota_bind):
    return rota_bind(shop.app)
"""

TESTS = """
import pytest

import rota.testing
import shop


def test_an_order_enqueues_its_receipt(rota_app):
    shop.place_order(7, "ada@example.com")
    run = rota.testing.assert_enqueued(rota_app, shop.send_receipt, 7, "ada@example.com")
    rota.testing.assert_not_enqueued(rota_app, shop.send_receipt, 8, "ada@example.com")
    with pytest.raises(AssertionError, match="expected no pending run of shop.send_receipt"):
        rota.testing.assert_not_enqueued(rota_app, shop.send_receipt)
    assert rota.testing.run_pending(rota_app) == 1
    assert rota_app.get_run(run.id).result == "receipt 7 sent to ada@example.com"
    rota.testing.assert_not_enqueued(rota_app, shop.send_receipt)


def test_cleanup_runs_every_five_minutes(rota_app, rota_clock):
    shop.CLEANED.clear()
    assert rota.testing.run_pending(rota_app) == 0
    rota_clock.advance(minutes=4)
    assert rota.testing.run_pending(rota_app) == 0
    rota_clock.advance(minutes=1)
    assert rota.testing.run_pending(rota_app) == 1
    assert shop.CLEANED == [1]
    [run] = rota_app.list_runs(schedule="shop.cleanup")
    assert run.scheduled_for.isoformat() == "2030-01-01T00:05:00+00:00"


def test_charge_handler_directly():
    ctx = rota.testing.fake_context(shop.charge, attempt=2, max_attempts=3)
    assert rota.testing.call(shop.charge, 3, context=ctx) == {"order": 3, "attempt": 2, "of": 3}
    assert rota.testing.call(shop.send_receipt, 1, "b@example.com") == "receipt 1 sent to b@example.com"
    with pytest.raises(rota.SerializationError):
        rota.testing.call(shop.send_receipt, object(), "b@example.com")


def test_each_test_gets_a_fresh_database(rota_app):
    rota.testing.assert_not_enqueued(rota_app, shop.send_receipt)
    assert rota_app.database_url.endswith("rota-0.db")
"""

FRESH = """
import rota.testing


def test_a_fresh_app(rota_app, rota_clock):
    @rota_app.task(name="later")
    def later() -> None:
        pass

    later.options(delay=3600).enqueue()
    assert rota.testing.run_pending(rota_app) == 0
    rota_clock.advance(hours=1)
    assert rota.testing.run_pending(rota_app) == 1
"""


ORDERS = """
import psycopg

import rota

app = rota.App("postgresql://orders@db.internal:5432/orders")  # production; tests bind it


@app.task(name="orders.confirm")
def confirm(order_id: int) -> str:
    return f"order {order_id} confirmed"


def place_order(database_url: str, order_id: int, *, declined: bool = False) -> None:
    \"\"\"The endpoint: the order row and its confirmation commit together, or neither.\"\"\"
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO orders (id) VALUES (%s)", (order_id,))
        confirm.options(connection=conn).enqueue(order_id)
        if declined:
            raise RuntimeError("payment declined")
"""

ORDERS_CONFTEST = """
import os

import psycopg
import pytest

import orders
import rota.testing


@pytest.fixture
def rota_database_url():
    with rota.testing.postgres_schema(os.environ["ORDERS_TEST_DATABASE"]) as url:
        yield url


@pytest.fixture
def rota_app(rota_bind):
    return rota_bind(orders.app)


@pytest.fixture
def orders_db(rota_database_url):
    with psycopg.connect(rota_database_url) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    return rota_database_url
"""

ORDERS_TESTS = """
import psycopg
import pytest

import orders
import rota.testing


def test_an_order_and_its_confirmation_commit_together(rota_app, orders_db):
    assert rota_app.database_url == orders_db and "search_path" in orders_db
    orders.place_order(orders_db, 1)
    run = rota.testing.assert_enqueued(rota_app, orders.confirm, 1)
    assert rota.testing.run_pending(rota_app) == 1
    assert rota_app.get_run(run.id).result == "order 1 confirmed"


def test_a_declined_order_enqueues_nothing(rota_app, orders_db):
    with pytest.raises(RuntimeError, match="declined"):
        orders.place_order(orders_db, 2, declined=True)
    rota.testing.assert_not_enqueued(rota_app, orders.confirm)
    with psycopg.connect(orders_db) as conn:
        assert conn.execute("SELECT count(*) FROM orders").fetchone() == (0,)


def test_the_app_is_restored_after_each_test():
    assert orders.app.database_url == "postgresql://orders@db.internal:5432/orders"
"""


ORDERS_MYSQL = """
from urllib.parse import unquote, urlsplit

import pymysql

import rota

app = rota.App("mysql://orders@db.internal:3306/orders")  # production; tests bind it


@app.task(name="orders.confirm")
def confirm(order_id: int) -> str:
    return f"order {order_id} confirmed"


def connect(database_url: str) -> pymysql.connections.Connection:
    url = urlsplit(database_url)
    return pymysql.connect(host=url.hostname, port=url.port or 3306, user=unquote(url.username or ""),
                           password=unquote(url.password or ""), database=url.path.lstrip("/"))


def place_order(database_url: str, order_id: int, *, declined: bool = False) -> None:
    \"\"\"The endpoint: the order row and its confirmation commit together, or neither.\"\"\"
    conn = connect(database_url)
    try:
        conn.cursor().execute("INSERT INTO orders (id) VALUES (%s)", (order_id,))
        confirm.options(connection=conn).enqueue(order_id)
        if declined:
            raise RuntimeError("payment declined")
        conn.commit()
    finally:
        conn.close()  # uncommitted: rolled back
"""

ORDERS_MYSQL_CONFTEST = """
import os

import pytest

import orders
import rota.testing


@pytest.fixture
def rota_database_url():
    with rota.testing.mysql_database(os.environ["ORDERS_TEST_DATABASE"]) as url:
        yield url


@pytest.fixture
def rota_app(rota_bind):
    return rota_bind(orders.app)


@pytest.fixture
def orders_db(rota_database_url):
    conn = orders.connect(rota_database_url)
    conn.cursor().execute("CREATE TABLE orders (id int PRIMARY KEY)")
    conn.close()
    return rota_database_url
"""

ORDERS_MYSQL_TESTS = (
    ORDERS_TESTS.replace('and "search_path" in orders_db', 'and "/rota_test_" in orders_db')
    .replace(
        """    with psycopg.connect(orders_db) as conn:
        assert conn.execute("SELECT count(*) FROM orders").fetchone() == (0,)""",
        """    cur = orders.connect(orders_db).cursor()
    cur.execute("SELECT count(*) FROM orders")
    assert cur.fetchone() == (0,)""",
    )
    .replace("orders@db.internal:5432", "orders@db.internal:3306")
    .replace("postgresql://", "mysql://")
)


def plugin_args() -> list[str]:
    """-p loads the plugin unless rota is installed with its entry point (then it autoloads)."""
    installed = any(ep.name == "rota" for ep in entry_points(group="pytest11"))
    return [] if installed else ["-p", "rota.testing.plugin"]


def test_the_plugin_in_a_sample_app(pytester: pytest.Pytester, monkeypatch: Any) -> None:
    pytester.makepyfile(shop=SHOP, conftest=CONFTEST, test_shop=TESTS)
    monkeypatch.syspath_prepend(str(pytester.path))
    result = pytester.runpytest(*plugin_args(), "-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=4)
    sys.modules.pop("shop", None)


@pytest.mark.postgres
def test_the_plugin_on_a_postgresql_schema_with_the_callers_transaction(
    pytester: pytest.Pytester, monkeypatch: Any
) -> None:
    from tests.conftest import PG_URL, require

    require("postgres")
    monkeypatch.setenv("ORDERS_TEST_DATABASE", PG_URL)
    pytester.makepyfile(orders=ORDERS, conftest=ORDERS_CONFTEST, test_orders=ORDERS_TESTS)
    monkeypatch.syspath_prepend(str(pytester.path))
    result = pytester.runpytest(*plugin_args(), "-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=3)
    sys.modules.pop("orders", None)


@pytest.mark.mysql
def test_the_plugin_on_a_mysql_database_with_the_callers_transaction(
    pytester: pytest.Pytester, monkeypatch: Any
) -> None:
    from tests.conftest import MYSQL_URL, require

    require("mysql")
    monkeypatch.setenv("ORDERS_TEST_DATABASE", MYSQL_URL)
    pytester.makepyfile(orders=ORDERS_MYSQL, conftest=ORDERS_MYSQL_CONFTEST, test_orders=ORDERS_MYSQL_TESTS)
    monkeypatch.syspath_prepend(str(pytester.path))
    result = pytester.runpytest(*plugin_args(), "-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=3)
    sys.modules.pop("orders", None)


def test_every_fixture_has_a_docstring(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_nothing="def test_nothing(): pass")
    result = pytester.runpytest(*plugin_args(), "-p", "no:cacheprovider", "--fixtures")
    text = result.stdout.str()
    for name in ("rota_app", "rota_bind", "rota_clock", "rota_database_url"):
        assert name in text
        block = text.split(name, 1)[1].split("\n\n", 1)[0]
        assert "no docstring available" not in block, block


def test_bind_is_public_and_restores_the_app(tmp_path: Any) -> None:
    import rota
    import rota.testing

    app = rota.App(f"sqlite:///{tmp_path}/prod.db")
    clock = rota.FakeClock()
    with rota.testing.bind(app, f"sqlite:///{tmp_path}/test.db", clock) as bound:
        assert bound is app and app.clock is clock and app.database_url.endswith("test.db")
    assert app.database_url.endswith("prod.db") and app.clock is None
    assert {"bind", "postgres_schema", "mysql_database"} <= set(rota.testing.__all__)
    with pytest.raises(ValueError, match="is not a postgresql:// URL"), rota.testing.postgres_schema("sqlite:///x.db"):
        pass
    with pytest.raises(ValueError, match="is not a mysql:// URL"), rota.testing.mysql_database("sqlite:///x.db"):
        pass


def test_the_default_rota_app_fixture(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_fresh=FRESH)
    result = pytester.runpytest(*plugin_args(), "-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1)


def test_the_entry_point_is_declared() -> None:
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert pyproject["project"]["entry-points"]["pytest11"] == {"rota": "rota.testing.plugin"}


def test_fake_clock_advances_by_units() -> None:
    from datetime import UTC, datetime

    import rota

    clock = rota.FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
    assert clock.advance(minutes=5, seconds=1).isoformat() == "2030-01-01T00:05:01+00:00"
    assert clock.advance(60, hours=1).isoformat() == "2030-01-01T01:06:01+00:00"
    with pytest.raises(ValueError, match="unknown unit 'minute'; use weeks, days"):
        clock.advance(minute=1)
