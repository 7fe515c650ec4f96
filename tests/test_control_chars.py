"""Control characters (issue 21 item 10): names that hold them are refused; text logs show
them escaped wherever they come from (errors, arguments, names stored before this check);
the email notifier still sends an alert for such a run."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import rota
import rota.notify
from rota import logs
from rota.events import Event

from .conftest import WITH_MYSQL, start_worker, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


BAD_NAMES = ["a\nb", "a\rb", "tab\there", "esc\x1b[31m", "del\x7f", "c1\x85", "line\u2028sep", "trailing\n"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_task_and_schedule_names_with_control_characters_are_refused(app: rota.App, name: str) -> None:
    message = r"task name .* contains the control character .* a name is printable text on one line"
    with pytest.raises(rota.ConfigurationError, match=message):
        app.task(name=name)(lambda: None)
    app.task(name="t")(lambda: None)
    with pytest.raises(rota.ConfigurationError, match=r"schedule name .* contains the control character"):
        app.add_schedule(name, "t", every=60)
    with pytest.raises(rota.ConfigurationError, match=r"(task|schedule) name .* contains the control character"):
        app.schedule(every=60, name=name)(lambda: None)
    assert app.list_schedules() == []


def test_printable_unicode_names_are_still_fine(app: rota.App) -> None:
    app.task(name="rapport:été/日本")(lambda: None)
    app.add_schedule("täglich 03:00", "rapport:été/日本", every=60)
    assert [s.name for s in app.list_schedules()] == ["täglich 03:00"]


@pytest.fixture
def text_log() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    logs.configure("info", "text", stream=stream)
    yield stream
    logs.configure("warning", "text")


def test_text_logs_escape_control_characters_from_errors_and_arguments(app: rota.App, text_log: io.StringIO) -> None:
    """A handler logging its argument and an error message, through the text format a worker's
    process uses: the forged line stays inside the real one, escaped."""
    forged = "2026-12-01 10:00:00,000 INFO rota.worker: run 999 admin.grant succeeded"

    @app.task(name="evil")
    def evil(x: str) -> None:
        logging.getLogger("app.evil").warning("got %s", x)
        try:
            raise ValueError(f"boom\n{forged}\x1b[2K")
        except ValueError as exc:
            logging.getLogger("app.evil").error("failed: %s", exc)
            raise

    handle = evil.enqueue(f"arg\r\n{forged}")
    start_worker(app)
    assert handle.wait(timeout=15).status == "failed"
    out = text_log.getvalue()
    assert not [line for line in out.splitlines() if line.startswith(forged)]
    assert "\x1b" not in out and "\r" not in out
    assert f"got arg\\r\\n{forged}" in out and f"failed: boom\\n{forged}\\x1b[2K" in out


def test_an_escaped_message_keeps_its_traceback_lines(text_log: io.StringIO) -> None:
    try:
        raise RuntimeError("inner")
    except RuntimeError:
        logging.getLogger("rota.test").exception("failed: %s", "a\nb")
    out = text_log.getvalue()
    assert "failed: a\\nb" in out and "\nTraceback (most recent call last):\n" in out


def _stored_run_with_task(app: rota.App, task: str) -> rota.Run:
    """A run whose task name holds a newline: written before names were checked."""
    handle = app.task(name="t")(lambda: None).enqueue()
    store: Any = app.store
    with store._tx() as s:
        s.q_text(f"UPDATE rota_runs SET task = {store._p('task')} WHERE id = {int(handle.id)}", task=task)
    return app.get_run(handle.id)


def test_the_email_notifier_sends_an_alert_for_a_name_with_a_newline(app: rota.App) -> None:
    run = _stored_run_with_task(app, "old\nname")
    mail = rota.notify.Email(host="127.0.0.1", sender="rota@example.com", to=["ops@example.com"])
    event = Event("run_failed", datetime.now(UTC), "w1", run_id=run.id, run=run)
    message = mail.message(event)
    assert message["Subject"] == f"[rota] run {run.id} (old\\nname): run failed"
    assert "task: old\\nname\n" in message.get_content()  # escaped in the body too (issue 41): no forged line
