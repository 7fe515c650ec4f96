"""The in-flight run record: one per claimed run, kept small (made on the hot path)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

from .. import quarantine
from ..durable import Durable
from ..stores.base import Claimed
from ..tasks import RunContext, Task
from ..tracing import AttemptSpan
from .deadlines import Deadlines
from .offload import Threads


class Active:
    """A run this worker holds, from its claim until its outcome is decided."""

    __slots__ = (
        "_cancel",
        "async_task",
        "cancel_requested",
        "claim",
        "done",
        "durable",
        "kind",
        "returned",
        "started",
        "stuck",
        "task",
        "threads",
        "timed_out",
        "timer",
        "trace",
    )

    def __init__(self, claim: Claimed, task: Task[Any, Any] | None) -> None:
        self.claim = claim
        self.task = task
        self.kind = ""  # the executor that runs it (executors.kind_of)
        self.started = time.monotonic()
        self._cancel: threading.Event | None = None
        self.cancel_requested = False
        self.done = False  # its outcome is decided; whatever the handler does later is ignored
        self.stuck = False  # done, but its thread still runs the handler (it keeps its slot)
        # past its timeout, not decided yet: a limited run's thread keeps its limit's slot
        # until it returns (then the timeout is recorded; see ThreadExecutor._on_timeout)
        self.timed_out = False
        self.returned = False  # its pool call (a thread's handler, a child's watcher) has returned
        self.async_task: asyncio.Task[None] | None = None
        self.threads: Threads | None = None  # the calls its async handler made on the loop's executor (offload.py)
        self.timer: Deadlines | None = None  # what times it out (a thread's: its executor's)
        self.trace: AttemptSpan | None = None  # its span, when the worker traces (rota.tracing)
        self.durable: Durable | None = None  # its handler's steps and progress (rota.durable)

    @property
    def cancel(self) -> threading.Event:
        """Set when the run should stop (made on first use: most runs never need it)."""
        if self._cancel is None:
            self._cancel = threading.Event()
        return self._cancel


class CorruptArguments(quarantine.DamagedRun, ValueError):
    """A claimed run's stored args/kwargs are not valid JSON (a damaged or hand-written row):
    the run fails as damaged (rota.quarantine: error type DamagedRow), never retried."""


def decode_arguments(c: Claimed) -> tuple[Any, Any]:
    if c.args == "[]" and c.kwargs == "{}":  # most runs take no arguments (the hot path)
        return [], {}
    try:
        args = [] if c.args == "[]" else json.loads(c.args)  # most runs take no arguments
        kwargs = {} if c.kwargs == "{}" else json.loads(c.kwargs)
    except (ValueError, RecursionError) as exc:  # not JSON, or nested too deeply to decode
        raise CorruptArguments(f"stored arguments are not valid JSON ({exc})") from None
    if type(args) is not list or type(kwargs) is not dict:  # (an object's keys are text: JSON's)
        raise CorruptArguments(
            f"stored arguments are not a JSON array and a JSON object (args {c.args[:40]!r}, kwargs {c.kwargs[:40]!r})"
        )
    return args, kwargs


def run_context(active: Active) -> RunContext:
    c = active.claim
    parents = _parents_of(active.task, c.id) if active.task is not None else None
    if active.task is not None and getattr(active.task.app.store, "durable_supported", False):
        handler = getattr(active.task.fn, "__code__", None)
        active.durable = Durable(active.task.app.store, c.id, c.token, c.task, steps=c.steps, handler=handler)
    return RunContext(
        str(c.id), c.task, c.attempt, c.max_attempts, c.token, c.scheduled_for, c.schedule, active.cancel,
        parents=parents, durable=active.durable,
    )  # fmt: skip


def _parents_of(task: Task[Any, Any], run_id: int) -> Any:
    """ctx.parents, read from the store only if the handler asks."""
    return lambda: parent_results(task, run_id)


def parent_results(task: Task[Any, Any], run_id: int) -> dict[str, Any]:
    """A run's parents' results, decoded (a damaged one reads as None)."""
    decoded: dict[str, Any] = {}
    for parent, text in task.app.store.parent_results(run_id).items():
        try:
            decoded[str(parent)] = None if text is None else json.loads(text)
        except ValueError:
            decoded[str(parent)] = None
    return decoded


def child_context(c: Claimed, parents: dict[str, Any] | None = None) -> dict[str, Any]:
    """The RunContext fields a child process rebuilds its context from."""
    return {
        "parents": parents or {},
        "run_id": str(c.id),
        "task": c.task,
        "attempt": c.attempt,
        "max_attempts": c.max_attempts,
        "token": c.token,
        "scheduled_for": c.scheduled_for,
        "schedule": c.schedule,
        "isolation": "process",  # no durable steps there: ctx.step refuses with one clear error
    }
