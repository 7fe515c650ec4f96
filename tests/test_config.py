"""Settings from ROTA_* variables: precedence, every bad variable, redaction of passwords."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

import rota
from rota import config
from rota.cli.running import _flag_or_app
from rota.errors import ConfigurationError

ROOT = Path(__file__).resolve().parent.parent

BAD = {
    "database_url": "rota.db",
    "locks_url": "localhost:6379",
    "concurrency": "0",
    "queues": "bad queue!",
    "lease": "-1",
    "poll_interval": "nan",
    "shutdown_timeout": "-2",
    "default_timeout": "an hour",
    "retention": "forever",
    "prune_interval": "0",
    "high_frequency": "-1",
    "pool_size": "many",
    "pooler": "session",
    "listen_url": "db.example:5432",
    "metrics_port": "99999",
    "prefetch": "-1",
    "log_level": "loud",
    "log_format": "xml",
    "log_every_run": "maybe",
    "dashboard_host": " ",
    "dashboard_port": "0",
    "dashboard_token": " ",
    "dashboard_forwarded_allow_ips": "localhost",
    "dashboard_allowed_hosts": "dash.internal,evil.example/path",
}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for setting in config.SETTINGS.values():
        monkeypatch.delenv(setting.env, raising=False)


def test_every_setting_has_a_bad_value_case() -> None:
    assert set(BAD) == set(config.SETTINGS)
    assert all(s.env == "ROTA_" + s.name.upper() for s in config.SETTINGS.values())


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_variable_is_one_line_naming_variable_value_and_what_is_valid(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    setting = config.SETTINGS[name]
    monkeypatch.setenv(setting.env, BAD[name])
    with pytest.raises(ConfigurationError) as info:
        config.from_env(name)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{setting.env}=")
    assert "is not valid: expected " in message
    shown = "***" if setting.secret else BAD[name]
    assert repr(shown) in message


@pytest.mark.parametrize(
    ("name", "raw", "parsed"),
    [
        ("concurrency", "7", 7),
        ("queues", "mail, reports", ["mail", "reports"]),
        ("lease", "2.5", 2.5),
        ("shutdown_timeout", "0", 0.0),
        ("retention", "failed=90d,succeeded=12h", {"failed": timedelta(days=90), "succeeded": timedelta(hours=12)}),
        ("retention", "none", {}),
        ("metrics_port", "9100", 9100),
        ("prefetch", "0", 0),
        ("log_level", "DEBUG", "debug"),
        ("log_format", "json", "json"),
        ("log_every_run", " On", True),
        ("log_every_run", "0", False),
        ("dashboard_port", "8080", 8080),
        ("dashboard_forwarded_allow_ips", "10.1.2.3/8, ::1,*", ["10.0.0.0/8", "::1", "*"]),
        ("dashboard_allowed_hosts", "dash.internal, localhost,", ["dash.internal", "localhost"]),
        ("dashboard_allowed_hosts", "*", ["*"]),
    ],
)
def test_good_variables_parse(name: str, raw: str, parsed: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(config.SETTINGS[name].env, raw)
    assert config.from_env(name) == parsed


def test_app_precedence_argument_over_variable_over_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path}/rota.db"
    app = rota.App(url)
    assert (app.concurrency, app.lease, app.poll_interval, app.shutdown_timeout) == (5, 30.0, 1.0, 30.0)
    assert app.retention["failed"] == timedelta(days=30) and app.setting_sources["concurrency"] == "default"
    for env, raw in {
        "ROTA_CONCURRENCY": "7",
        "ROTA_LEASE": "12",
        "ROTA_POLL_INTERVAL": "0.5",
        "ROTA_SHUTDOWN_TIMEOUT": "3",
        "ROTA_RETENTION": "failed=2d",
        "ROTA_PRUNE_INTERVAL": "60",
        "ROTA_POOL_SIZE": "3",  # PostgreSQL only: ignored (not an error) on SQLite
    }.items():
        monkeypatch.setenv(env, raw)
    app = rota.App(url)
    assert (app.concurrency, app.lease, app.poll_interval, app.shutdown_timeout) == (7, 12.0, 0.5, 3.0)
    assert app.retention == {"failed": timedelta(days=2)} and app.prune_interval == 60.0
    assert app.setting_sources["concurrency"] == "environment"
    app = rota.App(url, concurrency=2, lease=9, retention=None)
    assert (app.concurrency, app.lease, app.poll_interval, app.retention) == (2, 9, 0.5, {})
    assert app.setting_sources["concurrency"] == "argument"
    monkeypatch.setenv("ROTA_DATABASE_URL", f"sqlite:///{tmp_path}/env.db")
    assert rota.App().database_url.endswith("env.db") and rota.App(url).database_url == url


def test_a_bad_variable_stops_the_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROTA_CONCURRENCY", "seven")
    with pytest.raises(ConfigurationError, match=r"^ROTA_CONCURRENCY='seven' is not valid: expected a whole number"):
        rota.App(f"sqlite:///{tmp_path}/rota.db")
    assert rota.App(f"sqlite:///{tmp_path}/rota.db", concurrency=3).concurrency == 3  # not read when given


@pytest.mark.parametrize("value", [0, -3, 1.5, True, 10_001])
def test_a_bad_concurrency_argument_stops_the_app(tmp_path: Path, value: object) -> None:
    """At App(), as a bad ROTA_CONCURRENCY does: not at app.worker(), with a traceback."""
    with pytest.raises(ConfigurationError, match=rf"^concurrency must be an integer from 1 to 10000, got {value!r}$"):
        rota.App(f"sqlite:///{tmp_path}/rota.db", concurrency=value)  # type: ignore[arg-type]


def test_a_bad_variable_stops_a_worker_even_when_code_sets_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROTA_CONCURRENCY", "seven")
    app = rota.App(f"sqlite:///{tmp_path}/rota.db", concurrency=3)  # the App is built (a client needs no worker)
    with pytest.raises(ConfigurationError, match=r"^ROTA_CONCURRENCY='seven' is not valid: expected a whole number"):
        app.worker(install_signal_handlers=False)
    app.close()


@pytest.mark.parametrize("name", sorted(BAD))
def test_every_bad_variable_stops_a_worker_start(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = rota.App(f"sqlite:///{tmp_path}/rota.db", concurrency=2, lease=3, poll_interval=0.1, retention=None)
    setting = config.SETTINGS[name]
    monkeypatch.setenv(setting.env, BAD[name])
    with pytest.raises(ConfigurationError, match=f"^{setting.env}="):
        app.worker(concurrency=2, queues=["q"], lease=3, poll_interval=0.1, install_signal_handlers=False)
    app.close()


def test_argument_beats_flag_beats_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROTA_CONCURRENCY", "7")
    url = f"sqlite:///{tmp_path}/rota.db"
    assert _flag_or_app(rota.App(url), "concurrency", 9) == 9  # flag over variable
    assert _flag_or_app(rota.App(url), "concurrency", None) is None  # the App's (variable) stands
    assert _flag_or_app(rota.App(url, concurrency=2), "concurrency", 9) is None  # argument over flag


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgresql://u:s3cret@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgresql://:s3cret@h/db", "postgresql://:***@h/db"),
        ("postgresql://u@h/db?password=s3cret&sslmode=require", "postgresql://u@h/db?password=***&sslmode=require"),
        ("postgresql://u@h/db?sslmode=require&PASSWORD=s3cret", "postgresql://u@h/db?sslmode=require&PASSWORD=***"),
        ("redis://:s3cret@h:6379/0", "redis://:***@h:6379/0"),
        ("sqlite:///rota.db", "sqlite:///rota.db"),
        ("host=h password='s 3cret' dbname=x", "host=h password=*** dbname=x"),
    ],
)
def test_redact_url(text: str, expected: str) -> None:
    assert config.redact_url(text) == expected


def test_redact_text_removes_a_known_password_wherever_a_driver_echoes_it() -> None:
    url = "postgresql://u:p%40ss@h/db"
    message = 'missing "=" after "p@ss" in connection info string; also p%40ss'
    assert "p@ss" not in config.redact_text(message, url) and "p%40ss" not in config.redact_text(message, url)


def test_database_label_and_stats_are_redacted(pg_url: str) -> None:
    url = pg_url.replace("postgres@", "postgres:hunter2@", 1) + "&password=hunter3"  # trust auth ignores them
    app = rota.App(url, retention=None)
    try:
        shown = f"{app.database_label} {app!r} {app.stats()}"
        assert "hunter2" not in shown and "hunter3" not in shown and "postgres:***@" in shown
    finally:
        app.close()
    with pytest.raises(ConfigurationError) as info:
        rota.App("postgresq://user:hunter2@localhost/db?password=hunter3")
    assert "hunter2" not in str(info.value) and "hunter3" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgresql://u:pa'ss@h/db", "postgresql://u:***@h/db"),
        ('postgresql://u:pa"ss@h/db', "postgresql://u:***@h/db"),
        ("postgresql://u:p@ss@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u@h/db?password=pa'ss&sslmode=require", "postgresql://u@h/db?password=***&sslmode=require"),
        ('postgresql://u@h/db?password=pa"ss', "postgresql://u@h/db?password=***"),
        ("postgresql://u@h/db?pass%77ord=s3cret&sslmode=require", "postgresql://u@h/db?pass%77ord=***&sslmode=require"),
        ("postgresql://u@h/db?%70%61ssword=s3cret", "postgresql://u@h/db?%70%61ssword=***"),
        ("postgresql://u@h/db?PASS%57ORD=s3cret", "postgresql://u@h/db?PASS%57ORD=***"),
        ('parameter: "password%3Ds3cret"', 'parameter: "password%3D***'),
        ("host=h password='it\\'s s3cret' dbname=x", "host=h password=*** dbname=x"),
    ],
)
def test_passwords_with_quotes_or_percent_encoded_keys_are_redacted(text: str, expected: str) -> None:
    """Issue 21 item 11: libpq decodes `pass%77ord` to `password`; quotes end no password."""
    assert config.redact_url(text) == expected


@pytest.mark.parametrize(
    ("query", "needles"),
    [
        ("sslmod=disable", ('invalid URI query parameter: "sslmod"', "(did you mean 'sslmode'?)")),
        ("password%3Dhunter2", ("missing key/value separator",)),
        ("pass%77ord=hunter2&sslmod=x", ("pass%77ord=***", "did you mean 'sslmode'")),
        ("sslmode=require&x=%00", ("forbidden value %00",)),
    ],
)
def test_a_bad_conninfo_parameter_is_one_line_without_the_password(query: str, needles: tuple[str, ...]) -> None:
    """Issue 21 item 11: libpq's parse error, raised at once (not a psycopg traceback at first
    use), in one line that never shows the password."""
    from click.testing import CliRunner

    from rota.cli import main

    url = f"postgresql://postgres:s3cret'pw@127.0.0.1:5432/test?{query}"
    with pytest.raises(ConfigurationError) as info:
        rota.App(url)
    message = str(info.value)
    assert message.startswith("invalid PostgreSQL URL postgresql://postgres:***@127.0.0.1:5432/test?")
    for command in (["runs"], ["status"], ["schedules"]):
        result = CliRunner(env={"ROTA_DATABASE_URL": url}).invoke(main, command)
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
        assert result.output.startswith("error: invalid PostgreSQL URL") and result.output.count("\n") == 1
        for needle in needles:
            assert needle in result.output and needle in message
        assert "hunter2" not in result.output + message and "s3cret" not in result.output + message
