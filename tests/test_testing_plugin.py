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
