"""What a handler may receive (RunContext) and a handle to an enqueued run (RunHandle)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .errors import Cancelled, WaitTimeout
from .models import Run

if TYPE_CHECKING:
    from .app import App
    from .durable import Durable, Signal


class RunContext:
    """What a handler declared with pass_context=True receives as its first argument.

    `token` is the fencing token of this claim: pass it to systems you write to, and have
    them refuse writes with a token lower than the highest they have seen. Long sync
    handlers should check `cancelled` now and then (it turns true when the run is cancelled,
    replaced, timed out or its lease is lost) and stop by raising: `ctx.raise_if_cancelled()`
    raises `rota.Cancelled`. A handler that returns normally is recorded as succeeded with its
    result, cancellation requested or not: only the handler knows whether its work is done."""

    __slots__ = (
        "_cancel",
        "_connection",
        "_durable",
        "_isolation",
        "_parents",
        "attempt",
        "max_attempts",
        "run_id",
        "schedule",
        "scheduled_for",
        "task",
        "token",
    )

    def __init__(
        self,
        run_id: str,
        task: str,
        attempt: int,
        max_attempts: int,
        token: int,
        scheduled_for: datetime,
        schedule: str | None,
        cancel: threading.Event | None = None,
        connection: Any = None,
        parents: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
        durable: Durable | None = None,
        isolation: str = "none",
    ) -> None:
        self._durable = durable
        self._isolation = isolation  # "process": a child process's context (no durable steps)
        self._connection = connection
        self._parents = parents
        self.run_id = run_id
        self.task = task
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.token = token
        self.scheduled_for = scheduled_for
        self.schedule = schedule
        self._cancel = cancel or threading.Event()

    @property
    def connection(self) -> Any:
        """A transactional task's connection to the store's database, inside the transaction
        that also records the run's success (rota.transactional)."""
        if self._connection is None:
            raise AttributeError(
                f"ctx.connection is only given to transactional tasks, while a worker runs them; declare "
                f"{self.task!r} with @app.task(transactional=True), and outside a worker call it with "
                "rota.testing.call(task, ...) (or pass fake_context(task, connection=conn))"
            )
        return self._connection

    @property
    def parents(self) -> Mapping[str, Any]:
        """The runs named in `after=`: parent id (str) -> its decoded result (read on first use)."""
        if callable(self._parents):
            self._parents = self._parents()
        return self._parents if self._parents is not None else {}

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def raise_if_cancelled(self) -> None:
        """Raise `rota.Cancelled` if the run should stop (see `cancelled`)."""
        if self._cancel.is_set():
            raise Cancelled(f"run {self.run_id} was asked to stop")

    # -- durable steps (rota/durable.py) ----------------------------------------------------
    @property
    def durable(self) -> Durable:
        return self._steps("durable steps")

    def _steps(self, call: str) -> Durable:
        if self._durable is None:
            from .durable import StepError

            if self._isolation == "process":
                raise StepError(
                    f"{call} in task {self.task!r}, declared with isolation='process': durable steps (ctx.step, "
                    "ctx.sleep, ctx.wait_for, ctx.progress) work only in the worker's process; declare the task "
                    "with isolation='none' (the default), or enqueue the isolated work as a task of its own"
                )
            raise StepError(
                f"durable steps (ctx.step, ctx.sleep, ctx.wait_for, ctx.progress) need a worker's process: "
                f"{self.task!r} runs without one here (a context made by hand, or a store without durable "
                "statements)"
            )
        return self._durable

    def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run `fn(*args, **kwargs)` once per run: its JSON result is saved (fenced by this
        attempt's token) and returned again, without running it, by every later execution."""
        return self._steps("ctx.step").step(name, _callable(name, fn), args, kwargs)

    async def step_async(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """`step` for async handlers: `fn` may be a coroutine function."""
        return await self._steps("ctx.step_async").step_async(name, _callable(name, fn), args, kwargs)

    def sleep(self, duration: Any, *, name: str | None = None) -> None:
        """Park the run for `duration` (timedelta or seconds): the handler's execution ends
        here and the run resumes on any worker once it is over (no slot held meanwhile)."""
        self._steps("ctx.sleep").sleep(duration, name)

    async def sleep_async(self, duration: Any, *, name: str | None = None) -> None:
        await asyncio.to_thread(self._steps("ctx.sleep_async").sleep, duration, name)

    def wait_for(self, signal: str, *, timeout: Any = None) -> Signal | None:
        """The signal `signal` sent to this run (App.signal), parking the run until it comes;
        None once `timeout` (timedelta or seconds; default and at most 366 days) has passed."""
        return self._steps("ctx.wait_for").wait_for(signal, timeout)

    async def wait_for_async(self, signal: str, *, timeout: Any = None) -> Signal | None:
        return await asyncio.to_thread(self._steps("ctx.wait_for_async").wait_for, signal, timeout)

    def progress(self, fraction: float, message: str | None = None) -> None:
        """How far the run is (0 to 1) and what it does: saved with the next heartbeat."""
        self._steps("ctx.progress").set_progress(fraction, message)

    def __repr__(self) -> str:
        return f"RunContext(run_id={self.run_id!r}, task={self.task!r}, attempt={self.attempt}, token={self.token})"


def _callable(name: object, fn: object) -> Callable[..., Any]:
    """The step's function, or one line when its result was passed instead (ctx.step("a", f(x)))."""
    if not callable(fn):
        from .durable import StepError, shown

        raise StepError(
            f"ctx.step({name!r}, {shown(fn)}): pass the step's function and its arguments, "
            f"ctx.step(name, fn, *args), not what calling it returns (a {type(fn).__name__})"
        )
    return fn


class RunHandle:
    """A reference to an enqueued run: `id`, and ways to look at it."""

    __slots__ = ("_app", "created", "id")

    def __init__(self, app: App, run_id: str, created: bool = True) -> None:
        self._app = app
        self.id = run_id
        self.created = created

    def refresh(self) -> Run:
        return self._app.get_run(self.id)

    @property
    def status(self) -> str:
        return self.refresh().status

    def wait(self, timeout: float | None = None, *, poll: float = 0.02) -> Run:
        """Block until the run reaches a final status; WaitTimeout after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = poll
        while True:
            run = self.refresh()
            if run.is_final:
                return run
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"run {self.id} is still {run.status} after {timeout} s")
            pause = delay if deadline is None else min(delay, max(0.0, deadline - time.monotonic()))
            time.sleep(pause)
            delay = min(delay * 1.5, 0.5)

    async def wait_async(self, timeout: float | None = None, *, poll: float = 0.02) -> Run:
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = poll
        while True:
            run = await asyncio.to_thread(self.refresh)
            if run.is_final:
                return run
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"run {self.id} is still {run.status} after {timeout} s")
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    def __repr__(self) -> str:
        return f"RunHandle(id={self.id!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunHandle) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)
