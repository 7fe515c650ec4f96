"""Issue 41, low items on both stores: after= ids in ASCII digits and in a bigint's range;
integers too long for Python's int/str conversion in arguments and results."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import rota

from .conftest import WITH_MYSQL, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


@pytest.mark.parametrize(
    "bad", ["١٢٣", "１２３", "1٢", 2**63, str(2**63), 10**30, "9" * 40, -1, "-1", 0, "0", " 1", "1_0"]
)
def test_after_refuses_ids_the_stores_cannot_hold_in_one_line(app: rota.App, bad: Any) -> None:
    @app.task(name="child")
    def child() -> None: ...

    for after in (bad, [bad]):
        with pytest.raises(rota.ConfigurationError) as info:
            child.options(after=after).enqueue()
        message = str(info.value)
        assert "\\n" not in message and repr(bad)[:60] in message and "ASCII digits" in message, message
    assert app.list_runs() == []


def test_after_names_an_id_too_long_to_write_by_its_size(app: rota.App) -> None:
    @app.task(name="child")
    def child() -> None: ...

    with pytest.raises(rota.ConfigurationError, match="got an integer of about 5001 digits"):
        child.options(after=[10**5000]).enqueue()


def test_after_takes_the_largest_id_as_a_run_that_does_not_exist(app: rota.App) -> None:
    @app.task(name="child")
    def child() -> None: ...

    with pytest.raises(rota.RotaError) as info:
        child.options(after=[2**63 - 1]).enqueue()
    assert not isinstance(info.value, rota.DatabaseError) and "9223372036854775807" in str(info.value)


LONG = int("1" * 4000) * 10**1000  # 5,000 digits: past Python's int/str limit (4,300)


def test_an_integer_too_long_to_store_is_refused_at_enqueue_naming_the_argument(app: rota.App) -> None:
    @app.task(name="t")
    def t(x: Any, y: Any = None) -> None: ...

    cases = [((LONG,), {}, "argument 1 (x) of t()"), ((1,), {"y": {"k": [LONG]}}, "argument 'y' of t()['k'][0]")]
    for args, kwargs, where in cases:
        with pytest.raises(rota.SerializationError) as info:
            t.enqueue(*args, **kwargs)
        message = str(info.value)
        assert message.startswith(where) and "5000 digits" in message and "\\n" not in message, message
    assert app.list_runs() == []


def test_a_result_too_long_to_store_fails_the_run_in_one_line(app: rota.App) -> None:
    from rota.testing import run_pending

    @app.task(name="big")
    def big() -> list[int]:
        return [LONG]

    handle = big.enqueue()
    run_pending(app)
    run = handle.refresh()
    assert run.status == "failed" and run.error is not None
    assert run.error["type"] == "SerializationError" and run.error["message"].startswith("the result of big()[0]")


def test_the_cli_refuses_a_too_long_integer_in_one_line(tmp_path: Any) -> None:
    from .test_cli_inputs import BASIC, cli, one_error_line

    url = f"sqlite:///{tmp_path}/rota.db"
    rota.App(url).migrate()
    for flag, value in (("--args", f"[1, {'7' * 5000}]"), ("--kwargs", f'{{"n": -{"7" * 5000}}}')):
        code, out = cli("--database-url", url, "enqueue", BASIC, "noop", flag, value)
        one_error_line(code, out, flag, "5000 digits", "at most 4300")


def test_a_stored_run_with_too_long_integers_still_lists(db_url: str) -> None:
    """Args, kwargs and result written by another client (or by hand) with integers Python
    will not read: the run is listed and shown as corrupt, never a traceback; a worker fails it."""
    from .conftest import make_app
    from .test_cli_inputs import _corrupt, cli

    app = make_app(db_url)

    @app.task(name="t")
    def t(*args: Any, **kwargs: Any) -> None: ...

    good, bad = t.options(delay=60).enqueue(1), t.options(delay=60).enqueue(2)
    digits = "9" * 5000
    cast = "::jsonb" if db_url.startswith("postgres") else ""
    _corrupt(
        db_url,
        f"UPDATE rota_runs SET args = '[{digits}]'{cast}, kwargs = '{{\"n\": {digits}}}'{cast}, "
        f"result = '{digits}'{cast} WHERE id = {bad.id}",
    )
    assert {r.id for r in app.list_runs()} == {good.id, bad.id}
    assert set(app.get_run(bad.id).corrupt) >= {"args", "kwargs", "result"}
    for command in (["runs"], ["runs", "--json"], ["run", bad.id], ["run", bad.id, "--json"], ["status"]):
        code, out = cli("--database-url", db_url, *command)
        assert code == 0 and "Traceback" not in out and not out.startswith("error"), (command, out)
    app.close()
