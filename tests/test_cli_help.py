"""What `rota --help` and docs/reference/cli-notes.md say about the options matches what the
commands do: each command's --log-level default, and which commands take --json."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from rota import logs
from rota.cli import main

from .ports import free_port

NOTES = Path(__file__).parent.parent / "docs" / "reference" / "cli-notes.md"


def cli(*args: str) -> tuple[int, str]:
    env = {"COLUMNS": "200", "ROTA_LOG_LEVEL": None, "ROTA_DATABASE_URL": None}
    result = CliRunner(env=env).invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def stated_log_level(*command: str) -> str:
    """The default --log-level that `rota COMMAND --help` states."""
    code, out = cli(*command, "--help")
    assert code == 0, out
    found = re.search(r"\[env ROTA_LOG_LEVEL; default ([^\]]+)\]", " ".join(out.split()))
    assert found is not None, out
    return found[1]


def test_each_command_states_its_own_log_level_default() -> None:
    for name in main.commands:
        expected = "info" if name in ("worker", "dashboard") else "warning"
        assert stated_log_level(name) == expected, name
    assert stated_log_level() == "warning; info for worker and dashboard"


@pytest.mark.parametrize(
    "args",
    [
        ("worker", "no_such_module:app"),
        ("dashboard", "no_such_module:app", "--port", str(free_port())),
        ("runs", "--database-url", "sqlite:////nonexistent/rota.db"),
    ],
)
def test_the_stated_log_level_default_is_the_one_used(args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    levels: list[str] = []
    monkeypatch.setattr(logs, "configure", lambda level, fmt: levels.append(level))
    code, out = cli(*args)
    assert code != 0 and levels, out  # each stops at its bad argument, after logging was set up
    assert levels[-1] == stated_log_level(args[0]), (args, levels)


def test_the_notes_list_the_commands_that_take_json() -> None:
    takers = sorted(n for n, c in main.commands.items() if any("--json" in getattr(p, "opts", ()) for p in c.params))
    documented = re.search(r"^error: no such option --json here: .*$", NOTES.read_text(), re.MULTILINE)
    assert documented is not None, "cli-notes.md quotes the error for a misplaced --json"
    listed = re.search(r"the commands that take it: ([a-z, -]+) \(", documented[0])
    assert listed is not None and listed[1].split(", ") == takers, (documented[0], takers)
    code, out = cli("--json", "runs")
    assert code == 2 and out.strip() == documented[0], out  # the notes quote the real message
