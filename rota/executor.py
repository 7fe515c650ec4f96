"""Daemon threads (for plain `def` handlers and store calls) and the import path of a
handler (for isolation="process"; the child process itself is rota.worker.child).

Why our own thread pool: `concurrent.futures.ThreadPoolExecutor` joins its threads when the
interpreter exits, so a handler that hangs forever would keep a stopped worker alive forever.
Python cannot kill a thread. Our threads are daemons: when a run times out its slot is freed
and its token fenced off (a late result is discarded), the thread keeps running until the
handler returns or the process exits. Code that may hang should use isolation="process",
whose child is killed at the timeout.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any


class DaemonPool:
    """A growing pool of daemon threads: submit(fn) runs fn() on an idle thread or a new one
    (up to `limit` threads; beyond that calls queue until a thread is free)."""

    def __init__(self, limit: int, name: str) -> None:
        self.limit = limit
        self.name = name
        self._queue: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._closed = False

    def submit(self, fn: Callable[[], None]) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the pool is closed")
            if self._idle == 0 and self._threads < self.limit:
                self._threads += 1
                threading.Thread(target=self._loop, name=f"{self.name}-{self._threads}", daemon=True).start()
            else:
                self._idle -= 1
        self._queue.put(fn)

    def _loop(self) -> None:
        while True:
            fn = self._queue.get()
            if fn is None:
                return
            with contextlib.suppress(BaseException):  # callers catch everything themselves
                fn()
            with self._lock:
                self._idle += 1

    def close(self) -> None:
        with self._lock:
            self._closed = True
            n = self._threads
        for _ in range(n):
            self._queue.put(None)


def handler_path(fn: Callable[..., Any]) -> tuple[str, str]:
    """(module, qualified name) by which a child process imports a handler."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not module or not qualname or "<locals>" in qualname or module == "__main__":
        raise ValueError(
            f"isolation='process' needs a handler importable by name (a module-level function "
            f"in an importable module), got {module}.{qualname}"
        )
    return module, qualname
