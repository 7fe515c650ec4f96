"""A durable task for the checkpoint crash tests (tests/test_durable_checkpoints.py): its
last step is returned at once, so its checkpoint is written with the run's finish."""

from __future__ import annotations

import os
import time

import rota

from .basic import _log

app = rota.App(os.environ.get("ROTA_DATABASE_URL", "sqlite:///rota.db"))


@app.task(name="returned", pass_context=True, retries=3, backoff=0)
def returned(ctx: rota.RunContext, pause: float) -> str:
    """Step 'one', then step 'two' returned at once; 'two' logs its start and end, pausing
    `pause` seconds between them on the first attempt (a test takes a lock meanwhile)."""

    def step(name: str, seconds: float = 0.0) -> str:
        _log(f"step {name} {ctx.run_id} {ctx.attempt} {os.getpid()}")
        time.sleep(seconds)
        _log(f"ended {name} {ctx.run_id} {ctx.attempt} {os.getpid()}")
        return name

    ctx.step("one", step, "one")
    return ctx.step("two", step, "two", pause if ctx.attempt == 1 else 0.0)  # type: ignore[no-any-return]
