"""Issue 41, item 11: a password written unencoded in a database or Redis URL (a "/", a
space, "@", ":", "#", "?", "%") is redacted in full wherever rota prints the URL: log lines,
errors and CLI output; and so are the pieces a driver shows of it after splitting it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rota
from rota import config
from rota.redaction import _passwords, redact_text

ROOT = Path(__file__).resolve().parent.parent
PASSWORDS = [
    "hunter/two",
    "hunter two",
    "hunter@two",
    "hunter:two",
    "hunter#two",
    "hunter?two",
    "hunter%two",
    "100%sure",
    "a b/c@d:e#f?g%h",
    "slash/ at@ end/",
    " lead space",
    "two  spaces@@",
]
SCHEMES = ["postgresql", "postgres", "redis", "rediss"]


def leaks(text: str, password: str) -> list[str]:
    """The password, or any piece of it of 3 characters or more with a letter, found in `text`."""
    pieces = {password, *_passwords(f"redis://:{password}@h/0")}
    return [p for p in pieces if len(p.strip()) >= 3 and any(c.isalpha() for c in p) and p in text]


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_userinfo_password_with_any_character_is_redacted(scheme: str, password: str) -> None:
    url = f"{scheme}://u:{password}@h:5432/db?sslmode=require"
    assert config.redact_url(url) == f"{scheme}://u:***@h:5432/db?sslmode=require"
    empty_user = f"{scheme}://:{password}@h/0"
    assert config.redact_url(empty_user) == f"{scheme}://:***@h/0"
    line = f"cannot connect to {url}: refused (user x@y.z)"
    assert (
        config.redact_text(line)
        == f"cannot connect to {scheme}://u:***@h:5432/db?sslmode=require: refused (user x@y.z)"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # two URLs on one line: each keeps its host
        ("db postgresql://u:a b@h1/db locks redis://:c/d@h2/0", "db postgresql://u:***@h1/db locks redis://:***@h2/0"),
        ("('postgresql://u:p w@h1/db', 'redis://:x y@h2/0')", "('postgresql://u:***@h1/db', 'redis://:***@h2/0')"),
        # a user with an unencoded "@"
        ("postgresql://me@corp:s3cret@h/db", "postgresql://me@corp:***@h/db"),
        ("postgresql://me@corp:my pass@h/db", "postgresql://me@corp:***@h/db"),
        # no password: a port, and an "@" later on the line, are left alone
        ("postgresql://h:5432/db failed; mail ops@example.com", "postgresql://h:5432/db failed; mail ops@example.com"),
        ("redis://u@h:6379/0 and a@b", "redis://u@h:6379/0 and a@b"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        # the end of the line ends a password
        ("postgresql://u:pw\nmail ops@example.com", "postgresql://u:pw\nmail ops@example.com"),
        # a URL query's password runs to the next "&" (libpq reads spaces and "/" in it)
        ("postgresql://u@h/db?password=a b/c&sslmode=require", "postgresql://u@h/db?password=***&sslmode=require"),
        ("postgresql://u@h/db?sslmode=require&password=a b#c", "postgresql://u@h/db?sslmode=require&password=***"),
        # conninfo: an unquoted value ends at a space
        ("host=h password=s3cret dbname=x", "host=h password=*** dbname=x"),
    ],
)
def test_redaction_edges(text: str, expected: str) -> None:
    assert config.redact_text(text) == expected


@pytest.mark.parametrize("password", PASSWORDS)
def test_the_pieces_a_driver_shows_of_a_split_password_are_redacted(password: str) -> None:
    url = f"postgresql://u:{password}@h/db"
    for piece in _passwords(url):
        assert config.redact_text(f"invalid port {piece!r} near {piece}", url).count("***") == 2, piece
    assert "1234" not in {p for p in _passwords("postgresql://u:ab/1234@h/db")}  # digits alone: logs keep numbers


def cli(*args: str, env: dict[str, str] | None = None) -> str:
    run = subprocess.run(
        [sys.executable, "-m", "rota", *args],
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    return run.stdout + run.stderr


@pytest.mark.parametrize("password", PASSWORDS)
def test_the_cli_never_prints_an_unencoded_database_password(password: str) -> None:
    """PostgreSQL on a closed port: libpq refuses some of these URLs, reads others oddly."""
    url = f"postgresql://u:{password}@127.0.0.1:1/db"
    out = cli("status", "--database-url", url) + cli("runs", env={"ROTA_DATABASE_URL": url})
    assert "error" in out.lower() and "Traceback" not in out, out
    assert not leaks(out, password), out


@pytest.mark.parametrize("password", PASSWORDS)
def test_errors_and_logs_never_show_an_unencoded_redis_password(
    password: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis on a closed port: the URL is refused at App(), or the first lock fails."""
    url = f"redis://:{password}@127.0.0.1:1/0"
    shown = ""
    with caplog.at_level(logging.DEBUG), pytest.raises(rota.RotaError) as info:
        app = rota.App(f"sqlite:///{tmp_path}/rota.db", locks_url=url, retention=None)
        shown = repr(app)
        try:
            with app.lock("x"):
                pass
        finally:
            app.close()
    shown += f" {info.value} {caplog.text}"
    assert not leaks(shown, password), shown
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("password", PASSWORDS)
def test_log_lines_never_show_an_unencoded_password(fmt: str, password: str) -> None:
    import io

    from rota import logs

    stream = io.StringIO()
    logs.configure("info", fmt, stream=stream)
    try:
        log = logging.getLogger("rota")
        log.warning("database unavailable: postgresql://u:%s@db/x; retrying", password)
        try:
            raise ConnectionError(f"cannot reach redis://:{password}@r:6379/0")
        except ConnectionError:
            log.exception("locks unavailable")
    finally:
        logs.configure("warning", "text")
    out = stream.getvalue()
    assert "postgresql://u:***@db/x; retrying" in out.replace("\\\\", "\\") and "redis://:***@r:6379/0" in out, out
    assert not leaks(out, password), out


def test_a_piece_of_a_password_goes_only_as_a_word_of_its_own() -> None:
    """A password split at a delimiter ("x/end") has pieces a driver may show ("end"): they are
    redacted where they stand alone, never inside other words ("pending", "networks")."""
    url = "postgresql://u:hunter/two end@db.example/rota"
    assert redact_text('host "two end" is pending on networks', url) == 'host "***" is pending on networks'
    assert redact_text("could not translate host name end: two", url) == "could not translate host name ***: ***"
    assert redact_text("the password is hunter/two end, not pending", url) == "the password is ***, not pending"
