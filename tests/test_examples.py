"""examples/ must keep working: each recipe is run here (both stores)."""

from __future__ import annotations

import importlib.util
import inspect
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import rota

from .conftest import WITH_MYSQL, require_module, store_url

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
TRANSACTIONAL = "connection" in inspect.signature(rota.Task.options).parameters
NEEDS_TXN = pytest.mark.skipif(
    not TRANSACTIONAL,
    reason="transactional enqueue, task.options(connection=...), comes from branch embed-client; runs once merged",
)


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from store_url(request, tmp_path)


def env_with(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("ROTA_DASHBOARD_TOKEN", None)
    env.update(extra)
    return env


def run(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_plain_script(db_url: str, tmp_path: Path) -> None:
    out = run([str(EXAMPLES / "plain_script.py")], tmp_path, env_with(ROTA_DATABASE_URL=db_url))
    lines = out.splitlines()
    assert [line.split(": ")[1] for line in lines[:3]] == [f"photo{i}.jpg.320.jpg" for i in range(3)]
    assert all(" succeeded: " in line for line in lines[:3])
    assert lines[3].startswith("schedule plain.cleanup next at 20") and lines[4] == "failures: none"


def load_fastapi_example(db_url: str, monkeypatch: Any) -> ModuleType:
    pytest.importorskip("fastapi")
    monkeypatch.setenv("ROTA_DATABASE_URL", db_url)
    monkeypatch.delenv("ROTA_DASHBOARD_TOKEN", raising=False)
    spec = importlib.util.spec_from_file_location(f"fastapi_example_{uuid.uuid4().hex}", EXAMPLES / "fastapi_app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --8<-- [start:fastapi-quote]
def test_fastapi_example_awaits_results_and_mounts_the_dashboard(db_url: str, monkeypatch: Any) -> None:
    from fastapi.testclient import TestClient

    example = load_fastapi_example(db_url, monkeypatch)
    with TestClient(example.api, base_url="http://localhost") as client:
        quote = client.get("/quote", params={"items": 3})
        assert quote.status_code == 200, quote.text
        assert quote.json()["total_cents"] == 3750 and quote.json()["items"] == 3
        assert example.app.get_run(quote.json()["run_id"]).status == "succeeded"
        assert client.get("/rota/healthz").status_code == 200
        stats = client.get("/rota/api/stats")
        assert stats.status_code == 200 and stats.json()["runs"]["succeeded"] == 1


# --8<-- [end:fastapi-quote]


# --8<-- [start:fastapi-signup]
@NEEDS_TXN
def test_fastapi_signup_commits_the_user_and_its_run_together(db_url: str, monkeypatch: Any) -> None:
    from fastapi.testclient import TestClient

    example = load_fastapi_example(db_url, monkeypatch)
    with TestClient(example.api, base_url="http://localhost") as client:
        ok = client.post("/signup", params={"email": "ada@example.com"})
        assert ok.status_code == 200, ok.text
        assert rota.RunHandle(example.app, ok.json()["run_id"]).wait(10).status == "succeeded"
        refused = client.post("/signup", params={"email": "bob@example.com", "fail_after_enqueue": True})
        assert refused.status_code == 409
        conn = example.connect()
        try:
            cursor = conn.cursor()
            cursor.execute("SELECT email FROM users")
            emails = [row[0] for row in cursor.fetchall()]
        finally:
            conn.close()
        assert emails == ["ada@example.com"]
        assert len(example.app.list_runs(task="shop.send_welcome")) == 1


# --8<-- [end:fastapi-signup]


DJANGO = EXAMPLES / "django_project"


def django_env(db_url: str) -> dict[str, str]:
    """The example project's environment on `db_url` (on MySQL: Django's driver, mysqlclient)."""
    if db_url.startswith("mysql"):
        from .test_txn import MYSQLCLIENT

        require_module("MySQLdb", MYSQLCLIENT)
    return env_with(DATABASE_URL=db_url, DJANGO_SETTINGS_MODULE="mysite.settings")


def manage(db_url: str, *args: str) -> str:
    return run(["manage.py", *args], DJANGO, django_env(db_url))


def manage_worker(db_url: str, *args: str) -> subprocess.Popen[str]:
    """`python manage.py rota_worker` in the background (stop it with SIGINT)."""
    env = django_env(db_url)
    command = [sys.executable, "manage.py", "rota_worker", "--poll-interval", "0.1", *args]
    return subprocess.Popen(command, cwd=DJANGO, env=env, stderr=subprocess.PIPE, text=True)


def stop(worker: subprocess.Popen[str]) -> str:
    worker.send_signal(signal.SIGINT)
    _, stderr = worker.communicate(timeout=60)
    return stderr


# --8<-- [start:django-worker]
def test_django_management_command_runs_a_worker(db_url: str) -> None:
    pytest.importorskip("django")
    manage(db_url, "migrate", "-v", "0")
    enqueue = (
        "from shop.models import Order; from shop.tasks import send_receipt; "
        "o = Order.objects.create(email='ada@example.com'); print(send_receipt.enqueue(o.id).id)"
    )
    run_id = manage(db_url, "shell", "-v", "0", "-c", enqueue).strip()
    worker = manage_worker(db_url)  # Django set up: the task uses the ORM
    try:
        app = rota.App(db_url)
        assert rota.RunHandle(app, run_id).wait(60).result == "receipt for order 1 sent to ada@example.com"
        app.close()
    finally:
        stderr = stop(worker)
    assert " started: " in stderr and f"run {run_id} shop.send_receipt succeeded" in stderr  # logged at info


# --8<-- [end:django-worker]


# --8<-- [start:django-view]
@NEEDS_TXN
def test_django_view_enqueues_inside_transaction_atomic(db_url: str) -> None:
    pytest.importorskip("django")
    manage(db_url, "migrate", "-v", "0")
    assert manage(db_url, "rota_migrate").startswith("applied: 0001")
    script = "\n".join(
        [
            "from django.test import Client",
            "from shop.models import Order",
            "from shop.tasks import app",
            "c = Client()",
            "print(c.post('/orders/', {'email': 'ada@example.com'}).status_code)",
            "try:",
            "    c.post('/orders/', {'email': 'bob@example.com', 'fail': '1'})",
            "except ValueError:",
            "    print('refused')",
            "print(Order.objects.count(), len(app.list_runs(task='shop.send_receipt')))",
        ]
    )
    assert manage(db_url, "shell", "-v", "0", "-c", script).split() == ["200", "refused", "1", "1"]


# --8<-- [end:django-view]
