"""The threads an `async def` handler starts, and how they keep its run.

`asyncio.to_thread(f)` and `loop.run_in_executor(None, f)` run f on the loop's default
executor. A cancelled await (a shutdown, a timeout, a cancellation request, a lost lease)
ends the coroutine at once, but f runs on: a thread cannot be stopped. So the worker's loop
gets a default executor of rota's own, `RunThreads`, which records each call against the
run whose handler made it (`RUN`, a context variable set in the handler's task, which the
tasks it creates inherit). The run counts as still running while any of those calls runs,
as a `def` handler's thread does: not decided, handed back, nor its limit's slot freed
before they end (CoroutineExecutor in executors.py; executors.still_running for a stopping
worker). A default executor the loop had already is kept: `RunThreads` hands it the calls.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

if TYPE_CHECKING:
    from .active import Active

P = ParamSpec("P")
T = TypeVar("T")

RUN: ContextVar[Active | None] = ContextVar("rota_run", default=None)  # the run whose handler this task runs


class Threads:
    """One run's calls on the default executor that have not ended (thread-safe)."""

    __slots__ = ("_live", "_lock", "_then")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: set[Future[Any]] = set()
        self._then: Callable[[], None] | None = None

    def add(self, future: Future[Any]) -> None:
        with self._lock:
            self._live.add(future)
        future.add_done_callback(self._ended)  # (at once if it has ended already)

    def _ended(self, future: Future[Any]) -> None:
        with self._lock:
            self._live.discard(future)
            then = None if self._live else self._then
            if then is not None:
                self._then = None
        if then is not None:
            then()

    def running(self) -> int:
        """How many of the calls have not ended (one queued, not started yet, counts)."""
        return len(self._live)

    def when_ended(self, callback: Callable[[], None]) -> bool:
        """Call `callback()` (from the thread whose call ends last) once none runs; False,
        and no call, if none runs now."""
        with self._lock:
            if not self._live:
                return False
            self._then = callback
            return True


def threads_running(active: Active) -> int:
    """How many calls the run's handler made on the default executor have not ended."""
    threads = active.threads
    return 0 if threads is None else threads.running()


class RunThreads(ThreadPoolExecutor):
    """The worker loop's default executor: each call is recorded against the current run."""

    def __init__(self, inner: Executor | None = None) -> None:
        super().__init__(thread_name_prefix="asyncio")  # (as the loop's own default executor)
        self._inner = inner  # the loop's default executor before the worker's: the calls go there

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        if self._inner is not None:
            future = self._inner.submit(fn, *args, **kwargs)
        else:
            future = super().submit(fn, *args, **kwargs)
        active = RUN.get()
        if active is not None:  # (on the loop's thread: the handler's task calls this)
            if active.threads is None:
                active.threads = Threads()
            active.threads.add(future)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if self._inner is not None:
            self._inner.shutdown(wait, cancel_futures=cancel_futures)
        super().shutdown(wait, cancel_futures=cancel_futures)


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Make `RunThreads` the loop's default executor (once; one it had already is kept,
    behind it)."""
    current = getattr(loop, "_default_executor", None)  # (asyncio's, and uvloop's, attribute)
    if isinstance(current, RunThreads):
        return
    loop.set_default_executor(RunThreads(current if isinstance(current, Executor) else None))
