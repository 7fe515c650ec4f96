"""The README and the documentation pages cannot rot: what a newcomer runs there is run here.

- A fenced Python block preceded by `<!-- test: run -->` is run as a script; one preceded by
  `<!-- test: file PATH -->` is written to PATH first (blocks of one page share a temporary
  folder, in page order). When a page writes `test_*.py` files, pytest runs them there (the
  rota plugin's fixtures included). Each page runs against its own temporary SQLite database
  (ROTA_DATABASE_URL) in a fresh interpreter.
- Every `rota ...` command shown (in shell, systemd and container blocks and in inline code)
  names a command that exists, with options that command (or the group) has, and
  `rota COMMAND --help` succeeds.
- The generated reference (tools/mkdocs_hooks.py) covers every setting of rota/config.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import rota
from rota import config
from rota.cli import main

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MARKED = re.compile(r"<!-- test: (run|file [^ ]+) -->\s*\n```(\w*)[^\n]*\n(.*?)\n```", re.S)
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
SHELL = {"sh", "bash", "console", "shell", "ini"}


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def marked_blocks(text: str) -> list[tuple[str, str, str]]:
    return [(what, lang, body) for what, lang, body in MARKED.findall(text)]


RUNNABLE = [p for p in PAGES if marked_blocks(p.read_text())]


def test_pages_have_runnable_examples() -> None:
    names = {rel(p) for p in RUNNABLE}
    # docs/how-to/testing.md is run as written by tests/test_docs_testing.py
    assert {"README.md", "docs/getting-started.md"} <= names, names


@pytest.mark.parametrize("page", RUNNABLE, ids=rel)
def test_examples_of_the_page_run(page: Path, tmp_path: Path) -> None:
    env = dict(os.environ)
    env.update(ROTA_DATABASE_URL=f"sqlite:///{tmp_path}/rota.db", PYTHONPATH=str(tmp_path))
    for key in ("ROTA_DASHBOARD_TOKEN", "ROTA_CONCURRENCY", "ROTA_QUEUES", "ROTA_LOCKS_URL"):
        env.pop(key, None)
    tests = []
    for n, (what, lang, body) in enumerate(marked_blocks(page.read_text())):
        assert lang == "python", f"{rel(page)}: a <!-- test: {what} --> block must be ```python, not {lang!r}"
        if what.startswith("file "):
            target = tmp_path / what.removeprefix("file ")
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.parent != tmp_path and not (target.parent / "__init__.py").exists():
                (target.parent / "__init__.py").write_text("")
            target.write_text(body + "\n")
            if target.name.startswith("test_"):
                tests.append(target.name)
            continue
        script = tmp_path / f"_block_{n}.py"
        script.write_text(body + "\n")
        done = subprocess.run(
            [sys.executable, script.name], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, f"{rel(page)}, block {n + 1} failed:\n{body}\n--\n{done.stdout}\n{done.stderr}"
    if tests:
        args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), *tests]
        done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{rel(page)}: its tests failed:\n{done.stdout}\n{done.stderr}"


# -- rota commands shown in the pages ---------------------------------------------------------------
def shown_commands(text: str) -> list[list[str]]:
    """Every `rota ...` command line of a page, as arguments after `rota`."""
    lines: list[str] = []
    for lang, body in FENCE.findall(text):
        if lang in SHELL:
            for line in body.splitlines():
                found = re.search(r"(?:^|[\s=/$])rota\s+(.*)$", line)
                if found:
                    lines.append(found[1])
        elif lang in ("dockerfile", "yaml"):
            for array in re.findall(r'\["rota",[^\]]*\]', body):
                lines.append(shlex.join(json.loads(array)[1:]))
    for span in re.findall(r"(?<!`)`rota ([^`]+)`", FENCE.sub("", text)):
        lines.append(span.replace("[", " ").replace("]", " "))
    commands = []
    for line in lines:
        for part in re.split(r"\s(?:&&|\||&|;)\s?|\s&$", line):
            try:
                words = shlex.split(part, comments=True)
            except ValueError:  # an unbalanced quote in prose
                words = part.split()
            if words:
                commands.append(words)
    return commands


def _options(command: click.Command) -> dict[str, click.Option]:
    return {opt: p for p in command.params if isinstance(p, click.Option) for opt in (*p.opts, *p.secondary_opts)}


HELP = click.Option(["--help"], is_flag=True)


def check_command(words: list[str]) -> str | None:
    """None if `rota WORDS` names a command with options it has, else what is wrong."""
    group = {**_options(main), "--help": HELP, "-h": HELP}
    rest = list(words)
    while rest and rest[0].startswith("-"):
        name = rest.pop(0).split("=")[0]
        if name not in group:
            return f"rota has no option {name}"
        if not group[name].is_flag and not group[name].count and "=" not in name and rest:
            rest.pop(0)
    if not rest:
        return None
    if rest[0].isupper():  # a placeholder: rota COMMAND --help
        return None
    if rest[0] not in main.commands:
        return f"rota has no command {rest[0]!r}"
    command, path = main.commands[rest[0]], [rest[0]]
    if isinstance(command, click.Group) and len(rest) > 1 and rest[1] in command.commands:  # rota queues pause
        command, path, rest = command.commands[rest[1]], [*path, rest[1]], rest[1:]
    known = {**group, **_options(command)}
    for word in rest[1:]:
        if word.startswith("-") and len(word) > 1 and not re.fullmatch(r"-\d+(\.\d+)?", word):
            for name in word.split("=")[0].split("/"):
                if name not in known:
                    return f"rota {' '.join(path)} has no option {name}"
    help_run = CliRunner().invoke(main, [*path, "--help"])
    if help_run.exit_code != 0:
        return f"rota {rest[0]} --help failed: {help_run.output}"
    return None


def all_commands() -> list[tuple[str, list[str]]]:
    return [(rel(p), words) for p in PAGES for words in shown_commands(p.read_text())]


def test_the_pages_show_commands() -> None:
    shown = {words[0] for _, words in all_commands() if words and not words[0].startswith("-")}
    assert {"worker", "runs", "run", "schedules", "explain", "dashboard", "migrate"} <= shown, shown


def test_every_command_shown_exists() -> None:
    wrong = [
        f"{page}: rota {shlex.join(words)}: {why}" for page, words in all_commands() if (why := check_command(words))
    ]
    assert wrong == [], "\n".join(wrong)


def test_the_checker_catches_a_wrong_command() -> None:
    assert check_command(["wrker", "app:app"]) == "rota has no command 'wrker'"
    assert check_command(["worker", "app:app", "--concurency", "3"]) == "rota worker has no option --concurency"
    assert check_command(["--database-url", "sqlite:///x.db", "runs", "--status", "failed"]) is None
    assert check_command(["--version"]) is None


def test_rota_version_is_the_package_version() -> None:
    """One source: rota/_version.py gives rota.__version__, `rota --version` and (through
    pyproject.toml's dynamic version) the installed package's metadata."""
    result = CliRunner().invoke(main, ["--version"])
    assert (result.exit_code, result.output) == (0, f"rota {rota.__version__}\n")
    assert 'version = {attr = "rota._version.__version__"}' in (ROOT / "pyproject.toml").read_text()
    assert rota.__version__ in (ROOT / "CHANGELOG.md").read_text()


# -- the generated reference ------------------------------------------------------------------------
def load_hooks() -> object:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import mkdocs_hooks
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return mkdocs_hooks


def test_the_settings_page_lists_every_variable() -> None:
    """Moved from the README (test_config): the settings page renders config.SETTINGS."""
    hooks = load_hooks()
    page = (ROOT / "docs/reference/settings.md").read_text()
    assert "<!-- rota:settings -->" in page
    table = hooks.settings_table()  # type: ignore[attr-defined]
    missing = [s.env for s in config.SETTINGS.values() if f"| `{s.env}` |" not in table]
    assert missing == []
    assert "`rota worker -c/--concurrency`" in table and "`App(lease=)`" in table


def test_the_events_page_must_name_every_event() -> None:
    hooks = load_hooks()
    page = (ROOT / "docs/reference/events.md").read_text()
    hooks.render("hook-events", page, "events.md")  # type: ignore[attr-defined]
    hooks.render("log-events", page, "events.md")  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="missing \\['run_failed'\\]"):
        hooks.render("hook-events", page.replace("`run_failed`\n", "", 1), "events.md")  # type: ignore[attr-defined]


def test_no_page_points_to_design_md_or_names_the_test_database() -> None:
    """DESIGN.md is not in the repository; `.../test` is the database the test suite wipes:
    only the Development page may name it, as the suite's own."""
    wrong = []
    for page in PAGES:
        text = page.read_text()
        if "DESIGN.md" in text:
            wrong.append(f"{rel(page)} points to DESIGN.md")
        if rel(page) != "docs/development.md" and re.search(r"(postgresql|postgres)://[^\s`'\"]*/test\b", text):
            wrong.append(f"{rel(page)} names the test database in a URL")
    for module in sorted((ROOT / "rota").rglob("*.py")):  # docstrings show on the API pages
        if "DESIGN.md" in module.read_text() or re.search(r"postgres(ql)?://\S*/test\b", module.read_text()):
            wrong.append(f"{rel(module)} points to DESIGN.md or names the test database")
    assert wrong == []


def _fenced(page: str, lang: str) -> list[str]:
    return [body for found, body in FENCE.findall((ROOT / page).read_text()) if found == lang]


def test_the_deploy_guide_stops_workers_with_sigterm_and_a_longer_grace_period() -> None:
    """The systemd unit, the image and the Kubernetes manifest of the Deploy guide send SIGTERM
    to rota itself and wait longer than its shutdown_timeout before killing it."""
    yaml = pytest.importorskip("yaml")
    (unit,) = _fenced("docs/how-to/deploy.md", "ini")
    settings = dict(line.split("=", 1) for line in unit.splitlines() if "=" in line and not line.startswith("#"))
    drain = float(re.search(r"ROTA_SHUTDOWN_TIMEOUT=(\d+)", unit)[1])  # type: ignore[index]
    assert settings["KillSignal"] == "SIGTERM" and float(settings["TimeoutStopSec"]) > drain
    assert settings["ExecStart"].split()[:2] == ["/srv/myapp/.venv/bin/rota", "worker"]

    (dockerfile,) = _fenced("docs/how-to/deploy.md", "dockerfile")
    assert "STOPSIGNAL SIGTERM" in dockerfile
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", dockerfile, re.M)[1])  # type: ignore[index]
    assert cmd[:2] == ["rota", "worker"]  # the exec form: rota is PID 1 and gets the signal

    (manifest,) = _fenced("docs/how-to/deploy.md", "yaml")
    docs = {d["kind"]: d for d in yaml.safe_load_all(manifest)}
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert pod["terminationGracePeriodSeconds"] > float(env["ROTA_SHUTDOWN_TIMEOUT"])
    assert container["command"][:2] == ["rota", "worker"]
    assert docs["Job"]["spec"]["template"]["spec"]["containers"][0]["command"] == ["rota", "migrate"]
