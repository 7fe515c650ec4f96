"""Review of the stop grace for `def` handlers (rota/worker/shutdown.py STOP_GRACE): a handler
that returns within the grace is handed back; what it did through ctx.step must not be lost."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import rota

from .conftest import WITH_MYSQL, make_app, start_worker, store_url
from .procs import wait_until


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    yield from store_url(request, tmp_path)


def test_a_last_step_taken_in_the_stop_grace_is_not_run_again(db_url: str) -> None:
    """The handler stops on ctx.cancelled by taking its last step and returning it: the step's
    checkpoint is deferred to the run's finish (Durable._last), the run is handed back, and the
    checkpoint was dropped with the finish: the next worker charged the card again."""
    app = make_app(db_url)
    charged: list[int] = []
    started = threading.Event()

    @app.task(name="charge_on_stop", pass_context=True)
    def charge_on_stop(ctx: rota.RunContext) -> Any:
        started.set()
        while not ctx.cancelled:
            time.sleep(0.01)
        return ctx.step("charge", lambda: charged.append(1) or len(charged))

    h = charge_on_stop.enqueue()
    worker = start_worker(app, concurrency=1, shutdown_timeout=0.2)
    assert started.wait(10)
    assert worker.stop(timeout=15)
    run = h.refresh()
    assert (run.status, run.attempt) == ("pending", 0), run  # handed back within the grace
    assert charged == [1]
    other = start_worker(app, concurrency=1)
    wait_until(lambda: h.refresh().status != "pending" or len(charged) > 1, 15, "the run to run again")
    # the second execution is cancelled at once too (it stops only when asked): give it a stop
    other.stop(timeout=15)
    assert charged == [1], f"the step ran {len(charged)} times: its checkpoint was lost at the hand-back"
    app.close()


def test_a_last_step_taken_after_the_stop_by_a_kept_handler_is_not_run_again(db_url: str) -> None:
    """As above, past the grace: the handler outlives the stop (kept by the Keeper thread,
    rota/worker/stopping.py), then takes its last step and returns: handed back, step saved."""
    app = make_app(db_url)
    charged: list[int] = []
    started = threading.Event()

    @app.task(name="charge_late", pass_context=True)
    def charge_late(ctx: rota.RunContext) -> Any:
        started.set()
        while not ctx.cancelled:
            time.sleep(0.01)
        time.sleep(1.5)  # past the stop grace (1 s): kept
        return ctx.step("charge", lambda: charged.append(1) or len(charged))

    h = charge_late.enqueue()
    worker = start_worker(app, concurrency=1, shutdown_timeout=0.2)
    assert started.wait(10)
    assert worker.stop(timeout=15)
    assert h.refresh().status == "running"  # kept: its handler still runs
    wait_until(lambda: h.refresh().status == "pending", 15, "the Keeper to hand it back")
    assert charged == [1]
    assert [s["name"] for s in app.get_run(h.id).steps] == ["charge"], app.get_run(h.id).steps
    app.close()
