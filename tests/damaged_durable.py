"""Helpers of the damaged durable-row suites (test_damaged_steps.py, test_damaged_durable_views.py):
SQL written straight into rota_steps, rota_waits, rota_signals and rota_progress on each store,
as a hand edit, an older release or a hostile peer would."""

from __future__ import annotations

import time
from typing import Any

import rota

from . import mysql_db


def dialect(app: rota.App) -> str:
    return str(app.store.dialect)  # type: ignore[attr-defined]


def now(app: rota.App) -> str:
    """A valid time literal of the store (the current time)."""
    return {"sqlite": repr(time.time()), "postgresql": "now()", "mysql": "UTC_TIMESTAMP(6)"}[dialect(app)]


def bad_time(app: rota.App) -> str:
    """A time literal the column holds and Python cannot read: past year 9999 (SQLite's Unix
    seconds, PostgreSQL's infinity) or MySQL's zero date (a client without strict mode)."""
    return {"sqlite": "1e300", "postgresql": "'infinity'", "mysql": mysql_db.ZERO_DATE}[dialect(app)]


def bad_fraction(app: rota.App) -> str:
    """A progress fraction no API writes: NaN (PostgreSQL), infinity (SQLite), -5 (MySQL: its
    DOUBLE holds neither)."""
    return {"sqlite": "9e999", "postgresql": "'NaN'", "mysql": "-5"}[dialect(app)]


def text(value: str) -> str:
    """An SQL string literal (no backslashes in the tests' values)."""
    return "'" + value.replace("'", "''") + "'"


def sql(app: rota.App, statement: str) -> None:
    """Run `statement` as a hand edit: on MySQL/MariaDB without strict mode (mysql_db.execute)."""
    store: Any = app.store
    if store.dialect == "mysql":
        mysql_db.execute(app.database_url, statement)
        return
    with store._tx() as s:
        s.q_text(statement)


def step_row(app: rota.App, run_id: Any, name: str, *, outcome: str = "succeeded", result: str | None = '"saved"',
             error: str | None = None, started: str | None = None, seq: int = 0, attempt: int = 1) -> None:  # fmt: skip
    """Write one rota_steps row (values are SQL literals where they are times)."""
    at = now(app)
    res = "NULL" if result is None else text(result)
    err = "NULL" if error is None else text(error)
    sql(app, "INSERT INTO rota_steps (run_id, name, seq, attempt, started_at, finished_at, outcome, result, error) "
             f"VALUES ({int(run_id)}, {text(name)}, {seq}, {attempt}, {started or at}, {at}, {text(outcome)}, "
             f"{res}, {err})")  # fmt: skip


def signal_row(app: rota.App, run_id: Any, name: str, payload: str, sent: str | None = None) -> None:
    sql(app, "INSERT INTO rota_signals (run_id, name, payload, sent_at) "
             f"VALUES ({int(run_id)}, {text(name)}, {text(payload)}, {sent or now(app)})")  # fmt: skip
