"""retry_many passes over runs set aside as damaged (error type DamagedRow, or the older
CorruptArguments): their copies would fail the same way, and each later call would copy the
copies again (the soak made 22 copies of one damaged run in a minute). An explicit
App.retry of one, after its row was repaired, copies the repaired row. On both stores."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import rota
import rota.testing
from rota import quarantine

from .conftest import WITH_MYSQL, store_url
from .test_cli import cli


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def _sql(app: rota.App, text: str, **params: Any) -> None:
    """Run `text` with `{name}` standing for each parameter's placeholder."""
    store: Any = app.store
    with store._tx() as s:
        s.q_text(text.format(**{name: store._p(name) for name in params}), **params)


def _failed_runs(app: rota.App) -> tuple[rota.Task[..., Any], dict[str, str]]:
    """Four failed runs: a plain failure, one whose arguments are not JSON (failed by the worker
    as DamagedRow), one marked DamagedRow as rota writes it, one marked CorruptArguments
    as an older release wrote it (with spaces)."""

    @app.task(name="add", retries=0)
    def add(n: int) -> int:
        if n < 0:
            raise ValueError(f"negative: {n}")
        return n + 1

    runs = {"plain": add.enqueue(-1).id, "corrupt": add.enqueue(1).id}
    runs |= {"damaged": add.enqueue(-2).id, "older": add.enqueue(-3).id}
    _sql(app, "UPDATE rota_runs SET args = '[1,' WHERE id = {id}", id=int(runs["corrupt"]))
    rota.testing.run_pending(app)
    damaged = json.dumps(quarantine.run_error("args: not valid JSON"), separators=(",", ":"))
    older = json.dumps(
        {"type": "CorruptArguments", "message": "stored arguments are not valid JSON", "traceback": None}
    )
    _sql(app, "UPDATE rota_runs SET error = {e} WHERE id = {id}", e=damaged, id=int(runs["damaged"]))
    _sql(app, "UPDATE rota_runs SET error = {e} WHERE id = {id}", e=older, id=int(runs["older"]))
    assert [app.get_run(i).status for i in runs.values()] == ["failed"] * 4
    assert (app.get_run(runs["corrupt"]).error or {})["type"] == quarantine.ERROR_TYPE
    return add, runs


def _copies(app: rota.App, run_id: str) -> list[rota.Run]:
    return [r for r in app.list_runs(limit=1000) if r.retry_of == run_id]


def test_retry_many_passes_over_damaged_runs_call_after_call(app: rota.App) -> None:
    app.migrate()
    _, runs = _failed_runs(app)
    assert app.retry_many(status="failed") == 1  # the plain failure only
    rota.testing.run_pending(app)  # its copy fails again
    assert app.retry_many(status="failed") == 1  # the copy, not the damaged runs
    assert app.retry_many(status="failed") == 0
    for name in ("corrupt", "damaged", "older"):
        assert _copies(app, runs[name]) == [], name
    assert len(_copies(app, runs["plain"])) == 1


def test_an_explicit_retry_of_a_repaired_run_copies_the_repaired_row(app: rota.App) -> None:
    app.migrate()
    _, runs = _failed_runs(app)
    assert app.get_run(runs["corrupt"]).corrupt  # read once damaged
    _sql(app, "UPDATE rota_runs SET args = '[5]' WHERE id = {id}", id=int(runs["corrupt"]))
    _sql(app, "UPDATE rota_runs SET args = '[7]' WHERE id = {id}", id=int(runs["damaged"]))
    copies = [app.retry(runs["corrupt"]), app.retry(runs["damaged"])]
    assert [c.refresh().args for c in copies] == [[5], [7]]
    rota.testing.run_pending(app)
    assert [(c.refresh().status, c.refresh().result) for c in copies] == [("succeeded", 6), ("succeeded", 8)]


def test_rota_retry_failed_says_damaged_runs_are_passed_over(app: rota.App, db_url: str) -> None:
    app.migrate()
    _failed_runs(app)
    code, out = cli(db_url, "retry", "--failed")
    assert code == 0, out
    assert "1 failed run(s) enqueued again" in out
    assert "set aside as damaged" in out and "passed over" in out
