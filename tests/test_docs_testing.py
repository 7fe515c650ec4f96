"""docs/how-to/testing.md cannot rot: its patterns' files are taken from the page and run
as a user's project would run them (pytest with the rota plugin)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

import rota.stores.postgres  # noqa: F401  (loaded here, not first inside pytester's run, which drops what it imported)

from .conftest import MYSQL_URL, PG_URL, require
from .test_testing_plugin import plugin_args

pytest_plugins = ("pytester",)

PAGE = Path(__file__).resolve().parent.parent / "docs" / "how-to" / "testing.md"
DOC_DATABASE = "postgresql://app@127.0.0.1:5432/orders_test"
DOC_SERVER = "mysql://root@127.0.0.1:3306/mysql"


def files_of(section: str) -> dict[str, str]:
    """{path: source} of the ```python blocks of `section` that start with `# path.py`."""
    text = PAGE.read_text().split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    return {m[1]: block for block in blocks if (m := re.match(r"# (\S+\.py)\n", block))}


def run(pytester: pytest.Pytester, monkeypatch: Any, files: dict[str, str], modules: tuple[str, ...]) -> Any:
    for path, source in files.items():
        target = pytester.path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.parent != pytester.path:
            (target.parent / "__init__.py").touch()
        target.write_text(source)
    monkeypatch.syspath_prepend(str(pytester.path))
    monkeypatch.delenv("ROTA_DATABASE_URL", raising=False)
    try:
        return pytester.runpytest(*plugin_args(), "-p", "no:cacheprovider", "-q")
    finally:
        for name in [m for m in sys.modules if m.split(".")[0] in modules]:
            sys.modules.pop(name, None)


def test_the_sqlite_pattern_runs_as_written(pytester: pytest.Pytester, monkeypatch: Any) -> None:
    files = files_of("Pattern 1")
    assert set(files) == {"myshop/tasks.py", "conftest.py", "test_shop.py"}
    run(pytester, monkeypatch, files, ("myshop",)).assert_outcomes(passed=2)


@pytest.mark.postgres
def test_the_postgresql_pattern_runs_as_written(pytester: pytest.Pytester, monkeypatch: Any) -> None:
    require("postgres")
    files = files_of("Pattern 2")
    assert set(files) == {"orders.py", "conftest.py", "test_orders.py"}
    assert DOC_DATABASE in files["conftest.py"]
    files["conftest.py"] = files["conftest.py"].replace(DOC_DATABASE, PG_URL)
    run(pytester, monkeypatch, files, ("orders",)).assert_outcomes(passed=2)


@pytest.mark.mysql
def test_the_mysql_pattern_runs_as_written(pytester: pytest.Pytester, monkeypatch: Any) -> None:
    require("mysql")
    files = files_of("MySQL or MariaDB")
    assert set(files) == {"orders.py", "conftest.py", "test_orders.py"}
    assert DOC_SERVER in files["conftest.py"]
    files["conftest.py"] = files["conftest.py"].replace(DOC_SERVER, MYSQL_URL)
    run(pytester, monkeypatch, files, ("orders",)).assert_outcomes(passed=2)
