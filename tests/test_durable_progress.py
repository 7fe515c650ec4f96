"""Progress and parks (issue 43) on every store: the progress a handler sets just before it
sleeps or waits (the issue's own onboarding example does) is kept with the park, though no
heartbeat comes between; a parked run has no heartbeat to carry it later."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

import rota

from .conftest import WITH_MYSQL, start_worker, store_url, wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def test_progress_set_just_before_a_park_is_kept_with_it(app: rota.App) -> None:
    @app.task(name="confirming", pass_context=True)
    def confirming(ctx: rota.RunContext) -> str:
        ctx.progress(0.5, "waiting for the e-mail confirmation")
        got = ctx.wait_for("email-confirmed", timeout=timedelta(days=7))
        ctx.progress(1.0, "confirmed")
        return "done" if got else "expired"

    @app.task(name="napping", pass_context=True)
    async def napping(ctx: rota.RunContext) -> None:
        ctx.progress(0.25, "napping")
        await ctx.sleep_async(timedelta(hours=1))

    start_worker(app, lease=30.0)  # a heartbeat every 10 s: none comes between progress and park
    ref, nap = confirming.enqueue(), napping.enqueue()
    for run_id in (ref.id, nap.id):
        wait_for(lambda run_id=run_id: app.get_run(run_id).waiting is not None, what="the park")  # type: ignore[misc]
    progress = app.get_run(ref.id).progress
    assert progress is not None and (progress["fraction"], progress["message"]) == (
        0.5, "waiting for the e-mail confirmation")  # fmt: skip
    assert (app.get_run(nap.id).progress or {}).get("message") == "napping"
    app.signal(ref.id, "email-confirmed")
    assert ref.wait(10).result == "done"
    app.cancel(nap.id)
