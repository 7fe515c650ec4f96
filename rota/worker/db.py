"""Store calls off the event loop: each runs on a small pool of daemon threads and the
loop awaits its result (a hung connection never blocks the loop)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ..executor import DaemonPool

T = TypeVar("T")


class Db:
    """`await db(store.claim, ...)` runs the call on the store's threads."""

    def __init__(self, threads: int = 4) -> None:
        self.threads = threads
        self.pool = DaemonPool(threads, "rota-db")

    async def __call__(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()

        def call() -> None:
            try:
                result = fn(*args)
            except BaseException as exc:
                resolve(loop, future, None, exc)
            else:
                resolve(loop, future, result, None)

        self.pool.submit(call)
        return await future

    def close(self) -> None:
        self.pool.close()

    async def ended(self, timeout: float) -> bool:
        """After close(): wait until the calls under way have ended, at most `timeout`
        seconds (the loop stays free); whether they have. A call whose awaiting task was
        cancelled runs on: the store must not be closed under it (see Worker.run)."""
        deadline = time.monotonic() + timeout
        while not self.pool.join(0):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.005)
        return True

    def reopen(self) -> None:
        """A fresh pool after close() (run_until_idle may be called again)."""
        self.pool.close()
        self.pool = DaemonPool(self.threads, "rota-db")


def resolve(
    loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], result: Any, exc: BaseException | None
) -> None:
    """From any thread: settle `future` on its loop (unless the loop is gone)."""

    def apply() -> None:
        if future.done():
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)

    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(apply)
