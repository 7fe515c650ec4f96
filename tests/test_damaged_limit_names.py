"""A pending run whose limit_name names no stored limit (issue 41, review): a limit row deleted
by hand, or a run made by a process that declared a limit no worker has stored yet. It waited
forever, silently, and `rota limits` did not count it. It still waits (never unlimited: the
limit may be stored by the next worker that declares it), but it is named once (an undeclared
limit: rota.undeclared, not a damaged row) and `rota limits` lists it. On every store."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

import rota
from rota import quarantine, undeclared
from rota.cli import main

from .conftest import WITH_MYSQL, start_worker, store_url, wait_for
from .test_damaged_rows import _named, _sql


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


@pytest.fixture(autouse=True)
def _named_afresh() -> None:
    quarantine.forget()
    undeclared.forget()


def test_runs_under_a_limit_no_row_defines_wait_are_named_once_and_listed(
    app: rota.App, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.WARNING, logger="rota")
    monkeypatch.setattr("rota.worker.maintenance.FLOW_CHECK_SECONDS", 0.2)

    @app.task(name="one", limit=1)
    def one(n: int) -> int:
        return n

    lost = [one.enqueue(-1), one.enqueue(-2)]
    for run in lost:
        _sql(app, "UPDATE rota_runs SET limit_name = 'ghost' WHERE id = {id}", id=int(run.id))
    good = one.enqueue(1)
    start_worker(app, poll_interval=0.05)
    assert good.wait(timeout=20).status == "succeeded"
    wait_for(lambda: _undeclared(caplog) == {"ghost": 1}, timeout=15, what="the unknown limit named")
    for run in lost:
        got = app.get_run(run.id)
        assert got is not None and got.status == "pending", got  # it waits: never unlimited
    runner = CliRunner(env={"COLUMNS": "250"})
    out = runner.invoke(main, ["--database-url", app.database_url, "limits"])
    assert out.exit_code == 0 and "2 run(s) wait for limit 'ghost', which is not declared" in out.output
    out = runner.invoke(main, ["--database-url", app.database_url, "limits", "--json"])
    assert json.loads(out.output)["unknown_limits"] == [{"name": "ghost", "waiting": 2}]
    assert _undeclared(caplog) == {"ghost": 1}  # the CLI does not name it again
    assert _named(caplog, quarantine.LIMIT) == {}  # not a damaged row: a limit no worker declared


def _undeclared(caplog: pytest.LogCaptureFixture) -> dict[str, int]:
    """How many flow_undeclared warnings name each pool."""
    counts: dict[str, int] = {}
    for record in caplog.records:
        if getattr(record, "event", None) == undeclared.EVENT:
            name = record.fields["name"]  # type: ignore[attr-defined]
            counts[name] = counts.get(name, 0) + 1
    return counts
