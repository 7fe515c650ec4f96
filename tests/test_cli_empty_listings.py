"""An empty `rota runs` or `rota schedules` says in one line that nothing matched (not a bare
header), and `rota runs --schedule NAME` warns of a name no schedule has, as --task does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from rota.cli import main

from .conftest import WITH_MYSQL, make_app, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    yield from store_url(request, tmp_path)


def rota(url: str, *args: str) -> tuple[str, str]:
    result = CliRunner(env={"COLUMNS": "300"}).invoke(main, ["--database-url", url, *args])
    assert result.exit_code == 0, result.output
    return result.stdout, result.stderr


def test_empty_listings_say_nothing_matched(db_url: str) -> None:
    app = make_app(db_url)
    app.migrate()
    out, _ = rota(db_url, "schedules")
    assert out.splitlines()[1:] == ["no schedules (--all lists the removed ones too)"], out
    assert rota(db_url, "schedules", "--all")[0].splitlines()[1:] == ["no schedules"]
    assert rota(db_url, "runs")[0].splitlines()[1:] == ["no runs yet"]
    app.task(name="shop.charge")(lambda: None).enqueue()
    out, err = rota(db_url, "runs", "--task", "shop.charge", "--status", "failed")
    assert out.splitlines()[1:] == ["no runs match --task shop.charge --status failed"] and err == "", out
    out, err = rota(db_url, "runs", "--task", "a b")
    assert out.splitlines()[1:] == ["no runs match --task 'a b'"] and "no run of task 'a b' exists" in err
    app.close()


def test_runs_of_an_unknown_schedule_warn_with_a_close_name(db_url: str) -> None:
    app = make_app(db_url)
    app.migrate()
    app.add_schedule("nightly", "t", cron="0 3 * * *")
    out, err = rota(db_url, "runs", "--schedule", "nighlty")
    assert err == (
        "warning: unknown schedule 'nighlty' (did you mean 'nightly'?): rota schedules --all lists the schedule names\n"
    )
    assert out.splitlines()[1:] == ["no runs match --schedule nighlty"]
    assert rota(db_url, "runs", "--schedule", "nighlty", "--json") == ("[]\n", err)
    out, err = rota(db_url, "runs", "--schedule", "nightly")  # it exists: no runs yet, no warning
    assert err == "" and out.splitlines()[1:] == ["no runs match --schedule nightly"]
    app.remove_schedule("nightly")
    assert rota(db_url, "runs", "--schedule", "nightly")[1] == ""  # removed: still a name
    app.close()
