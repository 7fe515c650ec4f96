"""The body of an isolated run (isolation="process"): a fresh child process per run,
killed at its timeout or when the run is cancelled or its lease is lost.

A child dies with its worker: a worker killed with -9 cannot kill it, so the child asks
Linux to SIGKILL it when its parent dies (PR_SET_PDEATHSIG) and, everywhere, watches its
parent's pid and exits quietly (status 0, nothing written) once it is gone. Its run is
rescued when the worker's lease expires, like every run of a dead worker."""

from __future__ import annotations

import ctypes
import importlib
import json
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
from typing import Any

from ..serialization import encode_result, error_payload

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _child_main(
    conn: multiprocessing.connection.Connection,
    module: str,
    qualname: str,
    task: str,
    args: str,
    kwargs: str,
    context: dict[str, Any] | None,
    worker_pid: int | None = None,
) -> None:
    """Entry point of an isolated run: import the handler, call it, send back JSON."""
    if worker_pid is not None:
        _die_with(worker_pid)
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
        _send(conn, ("ok", encode_result(task, result)))
    except BaseException as exc:
        _send(conn, ("error", error_payload(exc)))
    finally:
        conn.close()


def _send(conn: multiprocessing.connection.Connection, outcome: tuple[str, Any]) -> None:
    """Send the outcome; if the worker is gone (a broken pipe), exit quietly: nobody reads."""
    try:
        conn.send(outcome)
    except OSError:  # BrokenPipeError, ConnectionResetError
        os._exit(0)


def _die_with(worker_pid: int) -> None:
    """End this child when the worker `worker_pid` dies (see the module docstring)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the watcher below still ends it
    if os.getppid() != worker_pid:  # it died before we asked
        os._exit(0)
    threading.Thread(target=_watch_parent, args=(worker_pid,), name="rota-child-watch", daemon=True).start()


def _watch_parent(worker_pid: int, every: float = 0.5) -> None:
    while os.getppid() == worker_pid:
        time.sleep(every)
    os._exit(0)


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
    call = (child, module, qualname, task, args, kwargs, context, os.getpid())
    proc = ctx.Process(target=_child_main, args=call, daemon=True)
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
