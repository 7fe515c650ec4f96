"""Where handlers run: a pool of daemon threads for plain `def` handlers, and a child
process per run for tasks declared with isolation="process".

Why our own thread pool: `concurrent.futures.ThreadPoolExecutor` joins its threads when the
interpreter exits, so a handler that hangs forever would keep a stopped worker alive forever.
Python cannot kill a thread. Our threads are daemons: when a run times out its slot is freed
and its token fenced off (a late result is discarded), the thread keeps running until the
handler returns or the process exits. Code that may hang should use isolation="process",
whose child is killed at the timeout.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import multiprocessing
import multiprocessing.connection
import queue
import threading
from collections.abc import Callable
from typing import Any

from .serialization import encode_result, error_payload


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


def _child_main(
    conn: multiprocessing.connection.Connection,
    module: str,
    qualname: str,
    task: str,
    args: str,
    kwargs: str,
    context: dict[str, Any] | None,
) -> None:
    """Entry point of an isolated run: import the handler, call it, send back JSON."""
    try:
        target: Any = importlib.import_module(module)
        for part in qualname.split("."):
            target = getattr(target, part)
        fn = getattr(target, "fn", target)  # a rota.Task wraps the function
        call_args = json.loads(args)
        call_kwargs = json.loads(kwargs)
        if context is not None:
            from .tasks import RunContext

            call_args.insert(0, RunContext(**context))
        result = fn(*call_args, **call_kwargs)
        if hasattr(result, "__await__"):
            import asyncio

            result = asyncio.run(_await(result))
        conn.send(("ok", encode_result(task, result)))
    except BaseException as exc:
        conn.send(("error", error_payload(exc)))
    finally:
        conn.close()


async def _await(awaitable: Any) -> Any:
    return await awaitable


def run_in_child(
    module: str,
    qualname: str,
    task: str,
    args: str,
    kwargs: str,
    context: dict[str, Any] | None,
    timeout: float | None,
    cancelled: threading.Event,
) -> tuple[str, Any]:
    """Run a handler in a fresh process; kill it at `timeout` or when `cancelled` is set.

    Returns ("ok", result JSON) | ("error", error payload) | ("timeout", None) |
    ("cancelled", None) | ("crashed", exit code)."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child_main, args=(child, module, qualname, task, args, kwargs, context), daemon=True)
    proc.start()
    child.close()
    deadline = None if timeout is None else _now() + timeout
    try:
        while True:
            wait = 0.1 if deadline is None else max(0.0, min(0.1, deadline - _now()))
            if parent.poll(wait):
                try:
                    outcome: tuple[str, Any] = parent.recv()
                except EOFError:
                    proc.join(1)
                    return "crashed", proc.exitcode
                proc.join(5)
                return outcome
            if not proc.is_alive():
                if parent.poll(0):
                    continue
                return "crashed", proc.exitcode
            if cancelled.is_set():
                return "cancelled", None
            if deadline is not None and _now() >= deadline:
                return "timeout", None
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(5)
        parent.close()


def _now() -> float:
    import time

    return time.monotonic()
