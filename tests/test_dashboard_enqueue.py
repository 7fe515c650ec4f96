"""POST /api/tasks/TASK/enqueue takes the path `task.enqueue` and `rota enqueue APP TASK` take
when the dashboard's App declares the task: its options in code, its argument check. A task
only some worker declares is refused unless the body asks for the defaults by name."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import rota
from rota.errors import ConfigurationError

from .conftest import WITH_MYSQL, make_app, store_url

TOKEN = "a-dashboard-token-of-32-chars-ok"
AUTH = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    yield from store_url(request, tmp_path)


def _shop(url: str) -> tuple[rota.App, Any]:
    app = make_app(url)

    @app.task(name="shop.jobs.send_email", retries=3, timeout=30, queue="mail", priority=5, backoff=2)
    def send_email(to: str, subject: str, body: str = "") -> str:
        return to

    app.prepare()  # a worker's start: the task's name is in rota_tasks
    return app, send_email


def _client(app: rota.App) -> Any:
    from starlette.testclient import TestClient

    from rota.web import create_app

    return TestClient(create_app(app, token=TOKEN), base_url="http://localhost")


def test_a_declared_task_is_enqueued_with_its_options_and_its_arguments_checked(db_url: str) -> None:
    app, send_email = _shop(db_url)
    web, path = _client(app), "/api/tasks/shop.jobs.send_email/enqueue"
    with pytest.raises(ConfigurationError) as refused_in_code:
        send_email.enqueue("x")
    bad = web.post(path, json={"args": ["x"]}, headers=AUTH)  # it answered 201; the run failed at 1/1
    assert bad.status_code == 400 and bad.json() == {"error": str(refused_in_code.value)}, bad.text
    assert "subject" in bad.json()["error"] and "\n" not in bad.json()["error"]
    extra = web.post(path, json={"kwargs": {"to": "a", "subject": "s", "cc": "b"}}, headers=AUTH)
    assert extra.status_code == 400 and "cc" in extra.json()["error"]
    assert app.list_runs() == []
    made = web.post(path, json={"args": ["a@b.c"], "kwargs": {"subject": "hi"}}, headers=AUTH)
    assert made.status_code == 201, made.text
    run = app.get_run(made.json()["id"])
    assert (run.max_attempts, run.timeout, run.queue, run.priority) == (4, 30.0, "mail", 5)
    assert (run.args, run.kwargs) == (["a@b.c"], {"subject": "hi"})
    given = web.post(path, json={"args": ["a", "s"], "retries": 1, "queue": "q", "priority": 2}, headers=AUTH)
    run = app.get_run(given.json()["id"])
    assert (run.max_attempts, run.timeout, run.queue, run.priority) == (2, 30.0, "q", 2)
    body = {"args": ["a", "s"], "key": "k", "unique_for": 600}
    first, again = (web.post(path, json=body, headers=AUTH) for _ in range(2))
    assert (first.status_code, again.status_code) == (201, 200) and first.json()["id"] == again.json()["id"]
    app.close()


def test_a_task_the_dashboard_does_not_declare_needs_defaults_true(db_url: str) -> None:
    """Served without the task's code (a bare App on the database URL): refused, saying why
    and how, unless the body asks for the defaults by name (no retries, no timeout)."""
    worker, _ = _shop(db_url)
    bare = make_app(db_url)
    web, path = _client(bare), "/api/tasks/shop.jobs.send_email/enqueue"
    refused = web.post(path, json={"args": ["x"]}, headers=AUTH)
    assert refused.status_code == 400, refused.text
    assert "not by this dashboard's App" in refused.json()["error"]
    assert '"defaults": true' in refused.json()["error"]
    assert bare.list_runs() == []
    unknown = web.post("/api/tasks/shop.jobs.send_mail/enqueue", json={"defaults": True}, headers=AUTH)
    assert unknown.status_code == 400 and "unknown task 'shop.jobs.send_mail'" in unknown.json()["error"]
    by_name = web.post(path, json={"args": ["x"], "defaults": True}, headers=AUTH)
    assert by_name.status_code == 201, by_name.text
    run = bare.get_run(by_name.json()["id"])
    assert (run.max_attempts, run.timeout, run.queue, run.args) == (1, None, "default", ["x"])
    no_code = web.post(path, json={"defaults": True, "key": "k", "unique_for": 60}, headers=AUTH)
    assert no_code.status_code == 400 and "need the code" in no_code.json()["error"]
    wrong = web.post(path, json={"defaults": "yes"}, headers=AUTH)
    assert wrong.status_code == 400 and wrong.json() == {"error": "defaults must be a boolean, got 'yes'"}
    bare.close()
    worker.close()
