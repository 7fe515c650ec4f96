"""`rota dashboard` refuses a token shorter than rota.web.MIN_TOKEN characters, from --token
or from the variables, in one line that names where it came from (never the token)."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from rota.cli import main
from rota.web import MIN_TOKEN

from .ports import free_port


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    import uvicorn

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda web, **options: calls.append({"web": web, **options}))
    return calls


def dashboard(tmp_path: Any, *args: str, env: dict[str, str | None] | None = None) -> tuple[int, str]:
    url = f"sqlite:///{tmp_path}/rota.db"
    assert CliRunner().invoke(main, ["--database-url", url, "migrate"]).exit_code == 0
    clean: dict[str, str | None] = {"ROTA_DASHBOARD_TOKEN": None, "ROTA_DASHBOARD_READONLY_TOKEN": None}
    result = CliRunner(env={**clean, **(env or {})}).invoke(
        main, ["--database-url", url, "dashboard", "tests.apps.basic:app", "--port", str(free_port()), *args]
    )
    return result.exit_code, result.output


def test_a_short_token_is_refused_from_the_flag_and_the_variables(tmp_path: Any, served: list[Any]) -> None:
    assert MIN_TOKEN == 16
    for args, env, source in (
        (("--token", "short"), None, "--token"),
        ((), {"ROTA_DASHBOARD_TOKEN": "short"}, "ROTA_DASHBOARD_TOKEN"),
        (("--token", "x" * 16), {"ROTA_DASHBOARD_READONLY_TOKEN": "short"}, "ROTA_DASHBOARD_READONLY_TOKEN"),
    ):
        code, out = dashboard(tmp_path, *args, env=env)
        assert code == 1 and out.count("\n") == 1, out
        assert out.startswith(f"error: the token from {source} is 5 characters long; a dashboard token needs at "
                              "least 16") and "short" not in out, out  # fmt: skip
    assert served == []
    code, out = dashboard(tmp_path, "--token", "x" * 16)
    assert code == 0 and len(served) == 1, out
