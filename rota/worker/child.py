"""The body of an isolated run (isolation="process"): a fresh child process per run,
killed at its timeout or when the run is cancelled or its lease is lost."""

from __future__ import annotations

import importlib
import json
import multiprocessing
import multiprocessing.connection
import threading
import time
from typing import Any

from ..serialization import encode_result, error_payload


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
            from ..tasks import RunContext

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
    return time.monotonic()
