"""Issue 41, low item: a task name, an error or a detail with line breaks cannot forge lines
in a notification email's body (each line is one field of the event)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import rota
import rota.notify
import rota.testing
from rota.events import Event

from .conftest import WITH_MYSQL, make_app, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


FORGED = "\r\nstatus: succeeded\nrun_url: https://evil.example.com/\u2028attempt: 9\x85x: y"


def test_line_breaks_in_an_events_fields_stay_inside_their_line(db_url: str) -> None:
    app = make_app(db_url)

    @app.task(name="explode")
    def explode() -> None:
        raise RuntimeError(f"disk full{FORGED}")

    handle = explode.enqueue()
    rota.testing.run_pending(app)
    run = dataclasses.replace(handle.refresh(), task=f"explode{FORGED}")
    mail = rota.notify.Email(host="127.0.0.1", sender="rota@example.com", to=["ops@example.com"])
    event = Event(
        "run_failed",
        datetime.now(UTC),
        f"w{FORGED}",
        run_id=handle.id,
        schedule_name=f"s{FORGED}",
        detail=f"why{FORGED}",
        run=run,
    )
    message = mail.message(event)
    body = str(message.get_content())
    lines = body.splitlines()  # splits at \r, \n, \u2028, \x85 and the rest
    keys = [line.split(": ", 1)[0] for line in lines]
    assert all(re.fullmatch(r"[a-z_]+", key) for key in keys), lines
    assert len(keys) == len(set(keys)) and "status: succeeded" not in lines, lines
    assert "\n" not in str(message["Subject"]).strip()
    app.close()
