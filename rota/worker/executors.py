"""Execution: one interface for the ways a handler runs, and the slots they share.

An executor takes a run (`submit`), delivers its end to the worker as (kind, value) through
the `deliver` callback on the loop, stops it on request (`stop`: cancellation asked, lease
lost, shutdown) and counts `stuck` bodies (decided runs whose handler still runs) in
`Executors.count_stuck`. An `async def` handler's calls on the loop's executor
(asyncio.to_thread) are its handler too (offload.py). Four ways today: a coroutine on the loop, a daemon thread, a
daemon thread inside a store transaction (transactional=True), a child process. The run's way is
chosen in ONE place (`kind_of`) from the registry `EXECUTORS`: a fourth way touches only
this file. `Executors` holds the in-flight table and the hard concurrency cap: a slot is
free only when its handler body really returned (stuck threads keep theirs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Protocol

from ..durable import Parked
from ..executor import handler_path
from ..serialization import encode_result
from ..stores.base import Claimed, Store
from ..tasks import Task
from ..tracing import attempt_span
from ..transactional import AFTER_SYNC_CALL, after_sync_call, call_transactional, committing
from .active import Active, child_context, decode_arguments, parent_results, run_context
from .child import run_in_child
from .deadlines import Deadlines
from .handoff import Deliver, Handoff, Result
from .offload import RUN, install, threads_running

log = logging.getLogger("rota.worker")


class Executor(Protocol):
    """How one kind of handler runs."""

    def submit(self, active: Active, task: Task[Any, Any]) -> None: ...

    def stop(self, active: Active, lost: bool) -> None: ...

    def may_decide(self, active: Active) -> bool:
        """False while the run's own thread decides its end (a transactional commit)."""


class _Decidable:
    def may_decide(self, active: Active) -> bool:
        return True


class CoroutineExecutor(_Decidable):
    """`async def` handlers: a task on the worker's loop, cancelled to stop. The calls it
    made on the loop's executor (asyncio.to_thread, run_in_executor(None, ...)) cannot be
    stopped: they keep the run as a `def` handler's thread does (`_ended`, offload.py)."""

    def __init__(self, slots: Executors) -> None:
        self.slots = slots

    def submit(self, active: Active, task: Task[Any, Any]) -> None:
        name = f"rota-run-{active.claim.id}"
        active.async_task = asyncio.get_running_loop().create_task(self._call(active, task), name=name)

    async def _call(self, active: Active, task: Task[Any, Any]) -> None:
        token = RUN.set(active)  # the calls this task (and the tasks it makes) puts in threads are the run's
        try:
            with self.slots.watch():  # the loop watchdog names the run if it blocks the loop
                outcome = await self._outcome(active, task)
        finally:
            RUN.reset(token)
        self._ended(active, outcome)

    def _ended(self, active: Active, outcome: Result) -> None:
        """The coroutine ended. Calls it made on the loop's executor that still run after
        rota stopped it (its timeout, a cancel request) keep the run as a `def` handler's
        thread keeps it (ThreadExecutor): it is decided once they end (its lease renewed, its
        limit's slot and its schedule's exclusivity held until then). A handler that ended
        of its own accord (it returned, raised or parked, leaving a call behind), a run
        decided already (its lease lost), or one past its timeout with no limit is decided
        now: the calls keep its worker slot (stuck) until they end."""
        n = threads_running(active)
        if not n:
            self.slots.deliver(active, outcome)
            return
        active.cancel.set()  # (ctx.cancelled: a call that looks at it may end sooner)
        kind = outcome[0]
        stopped = kind == "cancelled" or (kind == "timeout" and _limited(active))
        decide_now = active.done or not stopped
        _log_threads(active, kind, n, decide_now)
        if decide_now:
            self.slots.mark_stuck(active)
            self.slots.deliver(active, outcome)
        else:
            active.timed_out = kind == "timeout"  # (a stopping worker records it timed out)
        self._wait_threads(active, outcome)

    def _wait_threads(self, active: Active, outcome: Result) -> None:
        loop = asyncio.get_running_loop()

        def ended() -> None:  # on the thread whose call ended last
            with contextlib.suppress(RuntimeError):  # (the loop is closed: nothing to decide)
                loop.call_soon_threadsafe(self._threads_ended, active, outcome)

        if active.threads is None or not active.threads.when_ended(ended):
            self._threads_ended(active, outcome)

    def _threads_ended(self, active: Active, outcome: Result) -> None:
        """On the loop: the run's calls ended; its slot is free, or its outcome decided now."""
        if threads_running(active):  # a task its handler made started another meanwhile
            self._wait_threads(active, outcome)
        elif active.stuck:
            self.slots.unstuck(active)
        elif not active.done:  # (not a run kept by a stopping worker: see shutdown.py)
            self.slots.deliver(active, outcome)

    async def _outcome(self, active: Active, task: Task[Any, Any]) -> Result:
        c = active.claim
        outcome: Result
        if self.slots.traced is not None:  # the read in a thread, the span current in this task
            stored = await asyncio.to_thread(self.slots.traceparent, active)
            active.trace = attempt_span(c, stored, self.slots.traced)
        try:
            args, kwargs = decode_arguments(c)
            if task.opts.pass_context:
                args.insert(0, run_context(active))
            async with asyncio.timeout(c.timeout) as scope:
                result = await task.fn(*args, **kwargs)
            outcome = "ok", encode_result(task.name, result)
        except asyncio.CancelledError as exc:
            if not (active.cancel_requested or active.done):
                raise
            outcome = "cancelled", exc
        except TimeoutError as exc:
            outcome = ("timeout", None) if scope.expired() else ("error", exc)
        except (Exception, Parked) as exc:  # Parked: ctx.sleep_async / wait_for_async (rota.durable)
            outcome = "error", exc
        finally:
            if active.trace is not None:
                active.trace.leave()
        return outcome

    def stop(self, active: Active, lost: bool) -> None:
        task = active.async_task
        if task is not None:
            task.cancel()
            if lost and task.done() and threads_running(active):  # its coroutine ended: its calls run on
                self.slots.mark_stuck(active)


def _limited(active: Active) -> bool:
    return active.task is not None and active.task.opts.limit is not None


def _log_threads(active: Active, kind: str, n: int, decided: bool) -> None:
    c = active.claim
    what = {"timeout": "timed out", "cancelled": "was cancelled", "ok": "returned"}.get(kind, f"ended ({kind})")
    then = (
        "the run is decided now; they keep its worker slot until they end"
        if decided
        else "the run stays running (its lease renewed, its limit's slot held) until they end"
    )
    log.warning("run %d (%s): its handler %s, but %d call(s) it made in threads (asyncio.to_thread) still "
                "run, and a thread cannot be stopped: %s", c.id, c.task, what, n, then)  # fmt: skip


class ThreadExecutor(_Decidable):
    """Plain `def` handlers: a daemon thread. A thread cannot be killed: past its timeout
    or after a lost lease its run is decided but the thread keeps its slot (stuck) until
    the handler returns."""

    # a limited run past its timeout is decided when its handler returns (see _on_timeout)
    keeps_limit_slots = True

    def __init__(self, slots: Executors) -> None:
        self.slots = slots
        self.deadlines = Deadlines(self._on_timeout)  # one loop timer for every run's timeout

    def submit(self, active: Active, task: Task[Any, Any]) -> None:
        self.slots.handoff.run(active, lambda: self._body(active, task), self._returned)
        if active.claim.timeout is not None:
            self.deadlines.add(active, active.claim.timeout)
            active.timer = self.deadlines

    def _body(self, active: Active, task: Task[Any, Any]) -> Result:
        """On a pool thread: the handler's call; a limited run that outlived its timeout is
        recorded timed out whatever it returned (see _on_timeout), and one whose timeout
        passed while its call waited for a thread is not started."""
        if active.timed_out:
            return "timeout", None
        outcome = self._call(active, task)
        return ("timeout", None) if active.timed_out else outcome

    def _call(self, active: Active, task: Task[Any, Any]) -> Result:
        """On a pool thread: decode arguments, call the handler, encode its result."""
        if self.slots.traced is not None:
            self.slots.enter_trace(active)
        try:
            args, kwargs = decode_arguments(active.claim)
            if task.opts.pass_context:
                result = task.fn(run_context(active), *args, **kwargs)
            else:
                result = task.fn(*args, **kwargs)
            return "ok", "null" if result is None else encode_result(task.name, result)
        except BaseException as exc:
            return "error", exc
        finally:
            if active.trace is not None:
                active.trace.leave()
            if AFTER_SYNC_CALL:
                after_sync_call()

    def _on_timeout(self, active: Active) -> None:
        """Past its timeout: record the timeout; the thread keeps its slot until it returns.
        A run of a task with a limit is not decided until then: recorded now, its limit's
        slot would free in the database while its handler still runs, and the next run of
        its key would start beside it (more than the limit at once). It stays `running`,
        its lease renewed, and its timeout is recorded when the handler returns."""
        if active.done or not self.may_decide(active):
            return
        active.cancel.set()
        if self.keeps_limit_slots and active.task is not None and active.task.opts.limit is not None:
            active.timed_out = True
            log.warning("run %d (%s) timed out after %s s; its thread cannot be stopped, so it keeps its "
                        "limit's slot until the handler returns", active.claim.id, active.claim.task,
                        active.claim.timeout)  # fmt: skip
            return
        self._mark_stuck(active)
        self.slots.deliver(active, ("timeout", None))

    def stop(self, active: Active, lost: bool) -> None:
        if lost:
            self._mark_stuck(active)

    def _mark_stuck(self, active: Active) -> None:
        self.slots.mark_stuck(active)

    def _returned(self, active: Active) -> None:
        """A decided run's thread finally returned: its slot is free now."""
        self.slots.unstuck(active)


class TransactionalExecutor(ThreadExecutor):
    """transactional=True: the handler runs on a daemon thread inside a store transaction
    that also records its success, token-checked (rota.transactional); both commit or
    neither. While the thread commits, the commit decides the attempt (`may_decide`).
    Its timeout is decided at once, limit or not: the handler's writes are rolled back
    unless its own commit came first, so a late handler changes nothing."""

    keeps_limit_slots = False

    def _call(self, active: Active, task: Task[Any, Any]) -> Result:
        try:
            args, kwargs = decode_arguments(active.claim)
        except BaseException as exc:
            return "error", exc
        timeout = active.claim.timeout
        if self.slots.traced is not None:
            self.slots.enter_trace(active)
        try:
            return call_transactional(
                self.slots.store(),
                task,
                run_context(active),
                args,
                kwargs,
                timeout=timeout,
                key=active,
                stop=active.cancel,
            )
        finally:
            if active.trace is not None:
                active.trace.leave()

    def may_decide(self, active: Active) -> bool:
        return not committing(active)


class ProcessExecutor(_Decidable):
    """isolation="process": a child process per run (watched from a pool thread), killed
    at its timeout, on cancellation and when the lease is lost; never stuck."""

    def __init__(self, slots: Executors) -> None:
        self.slots = slots

    def submit(self, active: Active, task: Task[Any, Any]) -> None:
        self.slots.handoff.run(active, lambda: self._call(active, task), lambda _active: None)

    def _call(self, active: Active, task: Task[Any, Any]) -> Result:
        c = active.claim
        try:
            decode_arguments(c)
            module, qualname = handler_path(task.fn)
        except ValueError as exc:
            return "error", exc
        context = child_context(c, parent_results(task, c.id)) if task.opts.pass_context else None
        if self.slots.traced is not None:  # (the child process does not continue the trace)
            self.slots.enter_trace(active)
            if active.trace is not None:
                active.trace.leave()
        kind, value = run_in_child(module, qualname, task.name, c.args, c.kwargs, context, c.timeout, active.cancel)
        if kind == "error":
            return "child_error", value
        if kind == "cancelled":
            return ("cancelled", None) if active.cancel_requested else ("lost", None)
        return kind, value

    def stop(self, active: Active, lost: bool) -> None:
        pass  # the cancel event (already set) kills the child


def still_running(active: Active) -> bool:
    """Whether the run's handler may still execute in this process: a coroutine not ended
    (one that ignores its cancellation) or a call it made in a thread not ended, a pool call not returned (a thread's handler, or the
    watcher of a child process, which returns once the child is killed and reaped)."""
    if active.kind == "coroutine":  # (and the calls it made in threads: offload.py)
        return (active.async_task is not None and not active.async_task.done()) or threads_running(active) > 0
    return bool(active.kind) and not active.returned


EXECUTORS: dict[str, Callable[[Executors], Executor]] = {
    "coroutine": CoroutineExecutor,
    "thread": ThreadExecutor,
    "transactional": TransactionalExecutor,
    "process": ProcessExecutor,
}


def kind_of(task: Task[Any, Any]) -> str:
    """The one place that chooses how a task's handler runs."""
    if task.opts.isolation == "process":
        return "process"
    if task.opts.transactional:
        return "transactional"
    return "coroutine" if task.is_async else "thread"


class Executors:
    """The in-flight table, the hard concurrency cap, and the executor of each kind."""

    def __init__(self, concurrency: int, deliver: Deliver, store: Callable[[], Store]) -> None:
        self.concurrency = concurrency
        self.deliver = deliver
        self.store = store  # transactional handlers open their transaction on it
        self.inflight: dict[int, Active] = {}
        self.slot_freed = asyncio.Event()
        self.handoff = Handoff(concurrency * 2 + 4, deliver)
        self.by_kind: dict[str, Executor] = {name: make(self) for name, make in EXECUTORS.items()}
        self.default_timeout: float | None = None  # a run's timeout when its task sets none
        self.stuck = 0  # decided runs whose handler still runs, of every kind (they keep their slots)
        self.stuck_changed: Callable[[], None] = lambda: None  # on the loop: the registry shows it at once
        self.watch: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext  # LoopWatch.watching
        self.traced: str | None = None  # the worker's id when it traces attempts (rota.tracing)

    def enter_trace(self, active: Active) -> None:
        """On the handler's thread: start its attempt's span, linked to the context stored at
        enqueue (a read of the run's row; a failed read only loses the link)."""
        assert self.traced is not None
        active.trace = attempt_span(active.claim, self.traceparent(active), self.traced)

    def traceparent(self, active: Active) -> str | None:
        """The run's stored trace context (blocking: a read of its row)."""
        try:
            return self.store().run_traceparent(active.claim.id)
        except Exception as exc:
            log.debug("trace context of run %d not read: %s", active.claim.id, exc)
            return None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self.handoff.loop = loop
        self.slot_freed = asyncio.Event()
        install(loop)  # the calls async handlers make in threads are counted as theirs (offload.py)

    def mark_stuck(self, active: Active) -> None:
        """A decided run's handler still runs: it keeps its slot until `unstuck`."""
        if not active.stuck:
            active.stuck = True
            self.count_stuck(1)

    def unstuck(self, active: Active) -> None:
        """A decided run's handler finally ended: its slot is free now."""
        if active.stuck:
            active.stuck = False
            self.count_stuck(-1)
            self.slot_freed.set()

    def count_stuck(self, change: int) -> None:
        """The stuck bodies changed by `change` (one total for every executor: free_slots,
        on the hot path, reads it for every start)."""
        self.stuck += change
        self.stuck_changed()

    @property
    def free_slots(self) -> int:
        """Slots free for new runs: concurrency is a hard cap on running handler bodies."""
        return max(0, self.concurrency - len(self.inflight) - self.stuck)

    def submit(self, claim: Claimed, task: Task[Any, Any] | None) -> Active:
        """Start a claimed run (its end comes back through `deliver`)."""
        if claim.timeout is None and self.default_timeout is not None:
            claim.timeout = self.default_timeout  # its own timeout= always wins
            claim.default_timeout = True
        active = Active(claim, task)
        self.inflight[claim.id] = active
        if task is None:
            self.deliver(active, ("unknown", None))
            return active
        active.kind = kind_of(task)
        if task.opts.pass_context or active.kind == "process":
            active._cancel = active.cancel  # made here, on the loop: the handler's thread reads it
        try:
            self.by_kind[active.kind].submit(active, task)
        except Exception as exc:  # not started (a child process not spawned, a pool closing): a
            self.deliver(active, ("error", exc))  # failed attempt, retried by its policy
        return active

    def stop(self, active: Active, lost: bool) -> None:
        """Ask a run to stop (cancellation, lost lease, shutdown)."""
        active.cancel.set()
        executor = self.by_kind.get(active.kind)
        if executor is not None:
            executor.stop(active, lost)

    def may_decide(self, active: Active) -> bool:
        """False while a run's own thread decides its end (a transactional commit): the
        loop then records neither a timeout nor a lost lease for it."""
        executor = self.by_kind.get(active.kind)
        return executor is None or executor.may_decide(active)

    def finish(self, active: Active) -> bool:
        """The run's outcome is decided: free its slot. False if it was decided before."""
        if active.done:
            return False
        active.done = True
        if active.timer is not None:
            active.timer.discard(active)
        if self.inflight.get(active.claim.id) is active:  # not a newer attempt of the same run
            del self.inflight[active.claim.id]
        self.slot_freed.set()
        return True

    def describe(self, name: str) -> str:
        """A label for the asyncio task `name` (a run's handler, or a worker task)."""
        if name.startswith("rota-run-"):
            active = self.inflight.get(int(name[9:])) if name[9:].isdigit() else None
            task = f" ({active.claim.task})" if active is not None else ""
            return f"run {name[9:]}{task}"
        return f"task {name!r}"
