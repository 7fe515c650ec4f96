"""A database that refuses the connection is one `error:` line that says the driver's reason
once: PyMySQL's error is a (code, message) tuple, which was appended again as
`(caused by: (1045, "Access denied ..."))`."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import pytest
from click.testing import CliRunner

from rota.cli import main

from .conftest import MYSQL_URL, PG_URL, require


def refused(url: str) -> str:
    result = CliRunner(env={"ROTA_DATABASE_URL": None}).invoke(main, ["--database-url", url, "status"])
    assert result.exit_code == 1 and result.stdout == "" and result.stderr.count("\n") == 1, result.output
    return result.stderr


def _with(url: str, user: str | None = None, path: str | None = None) -> str:
    parts = urlsplit(url)
    netloc = f"{user}@{parts.hostname}:{parts.port}" if user else parts.netloc
    return urlunsplit(parts._replace(netloc=netloc, path=path or parts.path, query=""))


@pytest.mark.mysql
def test_a_mysql_refusal_says_its_reason_once() -> None:
    require("mysql")
    denied = refused(_with(MYSQL_URL, user="rota_no_such_user:wrong"))
    assert denied.count("Access denied for user 'rota_no_such_user'") == 1, denied
    assert "caused by" not in denied and "1045" not in denied and "wrong" not in denied, denied
    missing = refused(_with(MYSQL_URL, path="/rota_no_such_database"))
    assert missing.count("Unknown database 'rota_no_such_database'") == 1 and "caused by" not in missing, missing


@pytest.mark.postgres
def test_a_postgres_refusal_says_its_reason_once() -> None:
    require("postgres")
    denied = refused(_with(PG_URL, user="rota_no_such_user"))
    assert denied.count('role "rota_no_such_user" does not exist') == 1 and "caused by" not in denied, denied


def test_an_oserror_cause_keeps_its_file_name() -> None:
    """Only a driver error whose text is its (code, message) tuple is shortened to the message:
    an OSError's args are (errno, strerror) too, but its text names the file (a CA bundle, a
    socket path), the useful part."""
    from rota.cli.base import error_text
    from rota.errors import DatabaseError

    try:
        try:
            raise FileNotFoundError(2, "No such file or directory", "/etc/rota/ca.pem")
        except OSError as exc:
            raise DatabaseError("cannot connect to the database") from exc
    except DatabaseError as exc:
        assert "/etc/rota/ca.pem" in error_text(exc), error_text(exc)
