"""A run whose limit or rate no worker declared (found in review): a typo in a client's
`Limit(name=...)`, or a client that enqueues before any worker declared the pool. It waits
(never unlimited: a worker may declare the pool later), and before this it waited silently:
`Run.waiting` was None, `rota limits` did not list a rate at all, nothing was logged but a
misleading "damaged limit ... set aside". Now the run says what it waits for (`Run.waiting`,
`rota run ID`, the JSON API), `rota limits` and /api/limits list each undeclared name with
its waiting runs, and a worker logs one line per name, saying how to declare it. On every
store (contract fixtures)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

import rota
from rota import undeclared
from rota.web import create_app

from .conftest import WITH_MYSQL, start_worker, store_url, wait_for
from .test_cli import cli


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


@pytest.fixture(autouse=True)
def _named_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    undeclared.forget()
    monkeypatch.delenv("ROTA_DASHBOARD_TOKEN", raising=False)


def _client_and_worker(app_factory: Callable[..., rota.App]) -> tuple[rota.App, rota.App, dict[str, Any]]:
    """A client whose code names the pools 'emial' and 'githbu' (typos), and a worker whose
    code declares 'email' and 'github' (so its database has limits: the flow claim is on)."""
    client, worker = app_factory(), app_factory()

    @client.task(name="send", limit=rota.Limit(2, name="emial"))
    def send(n: int) -> int:
        return n

    @client.task(name="fetch", rate=rota.Rate(5, per=60, name="githbu"))
    def fetch(n: int) -> int:
        return n

    @worker.task(name="send", limit=rota.Limit(2, name="email"))
    def w_send(n: int) -> int:
        return n

    @worker.task(name="fetch", rate=rota.Rate(5, per=60, name="github"))
    def w_fetch(n: int) -> int:
        return n

    client.migrate()
    return client, worker, {"send": send, "fetch": fetch}


def _events(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [dict(r.fields) for r in caplog.records if getattr(r, "event", None) == undeclared.EVENT]  # type: ignore[attr-defined]


def test_a_run_of_an_undeclared_limit_or_rate_says_why_it_waits(
    app_factory: Callable[..., rota.App],
    db_url: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.WARNING, logger="rota")
    monkeypatch.setattr("rota.worker.maintenance.FLOW_CHECK_SECONDS", 0.1)
    client, worker, tasks = _client_and_worker(app_factory)
    limited = [tasks["send"].enqueue(1), tasks["send"].enqueue(2)]
    rated = tasks["fetch"].enqueue(3)
    start_worker(worker, poll_interval=0.05)
    wait_for(lambda: len(_events(caplog)) == 2, timeout=15, what="one line per undeclared name")

    assert [client.get_run(r.id).status for r in (*limited, rated)] == ["pending"] * 3  # never unlimited
    assert client.get_run(limited[0].id).waiting == {"kind": "undeclared", "limit": "emial", "until": None}
    assert client.get_run(rated.id).waiting == {"kind": "undeclared", "rate": "githbu", "until": None}
    assert client.get_run(rated.id).to_json()["waiting"]["rate"] == "githbu"

    code, out = cli(db_url, "run", limited[0].id)
    assert code == 0 and "waits for limit 'emial', which is not declared" in out, out
    code, out = cli(db_url, "limits", "--json")
    listed = json.loads(out)
    assert listed["unknown_limits"] == [{"name": "emial", "waiting": 2}]
    assert listed["unknown_rates"] == [{"name": "githbu", "waiting": 1}]
    code, out = cli(db_url, "limits")
    assert code == 0
    assert "2 run(s) wait for limit 'emial', which is not declared (did you mean 'email'?)" in out, out
    assert "1 run(s) wait for rate 'githbu', which is not declared (did you mean 'github'?)" in out, out

    web = TestClient(create_app(client), base_url="http://localhost")
    assert web.get("/api/limits").json() == listed  # the same records as the CLI's
    assert web.get(f"/api/runs/{rated.id}").json()["waiting"] == {"kind": "undeclared", "rate": "githbu", "until": None}

    # one line per name, not per run nor per check, naming it and how to declare it
    time.sleep(0.6)  # several checks later
    events = sorted(_events(caplog), key=lambda e: e["kind"])
    assert [(e["kind"], e["name"], e["waiting"]) for e in events] == [("limit", "emial", 2), ("rate", "githbu", 1)]
    records = [r for r in caplog.records if getattr(r, "event", None) == undeclared.EVENT]
    messages = [r.getMessage() for r in sorted(records, key=lambda r: r.fields["kind"])]  # type: ignore[attr-defined]
    assert "rota.Limit(N, name='emial')" in messages[0] and "did you mean 'email'?" in messages[0], messages
    assert "rota.Rate(N, per=..., name='githbu')" in messages[1], messages
    assert not [r for r in caplog.records if getattr(r, "event", None) == "row_damaged"]  # not "damaged"

    # a worker that declares them (the fixed deploy) starts them; nothing waits any more
    fixed = app_factory()
    fixed.task(name="send", limit=rota.Limit(2, name="emial"))(lambda n: n)
    fixed.task(name="fetch", rate=rota.Rate(5, per=60, name="githbu"))(lambda n: n)
    start_worker(fixed, poll_interval=0.05)
    for run in (*limited, rated):
        assert run.wait(timeout=20).status == "succeeded"
    code, out = cli(db_url, "limits", "--json")
    assert json.loads(out)["unknown_limits"] == [] and json.loads(out)["unknown_rates"] == []


def test_a_client_that_enqueues_before_any_worker_declared_the_limit(app_factory: Callable[..., rota.App]) -> None:
    """No limit stored at all yet (the flow claim is not even on): the run still says why."""
    client, _, tasks = _client_and_worker(app_factory)
    run = tasks["send"].enqueue(1)
    assert client.get_run(run.id).waiting == {"kind": "undeclared", "limit": "emial", "until": None}
    assert client.store.undeclared_flow() == [("limit", "emial", 1)]  # type: ignore[attr-defined]


def test_a_declared_limit_is_not_reported(app_factory: Callable[..., rota.App]) -> None:
    _, worker, _ = _client_and_worker(app_factory)
    worker.migrate()
    worker.prepare()  # stores 'email' and 'github', as a worker at start
    run = worker.get_task("send").enqueue(1)
    assert worker.get_run(run.id).waiting is None
    assert worker.store.undeclared_flow() == []  # type: ignore[attr-defined]


def test_a_name_is_logged_once_then_again_only_after_the_reminder(monkeypatch: pytest.MonkeyPatch) -> None:
    found = [("limit", "emial", 3), ("rate", "githbu", 1)]
    assert undeclared.due(found) == found
    assert undeclared.due([("limit", "emial", 4)]) == []  # a later check: not again
    assert undeclared.due([("limit", "other", 1)]) == [("limit", "other", 1)]  # a new name: at once
    monkeypatch.setattr(undeclared, "REMIND_SECONDS", 0.0)
    assert undeclared.due([("limit", "emial", 4)]) == [("limit", "emial", 4)]  # still undeclared an hour on
