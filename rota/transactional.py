"""Transactional handlers: `@app.task(transactional=True)`.

The handler runs inside one database transaction on a connection to the store's own
database, given to it as `ctx.connection` (a psycopg `Connection` on PostgreSQL, a
`sqlite3.Connection` on SQLite). When it returns, the run's success is recorded in that same
transaction with a token-checked UPDATE (the run must still be `running` under this
attempt's fencing token), then the transaction commits: the handler's writes and
"succeeded" commit together or not at all.

- The handler raises: everything rolls back; the failure (or retry) is recorded afterwards
  in a separate transaction, the normal way.
- The lease was lost (the run was rescued and claimed again, or handed back): the token
  check finds no row, everything rolls back, the attempt is discarded like a stale write.
- The handler ran past its timeout: rolled back before commit; the timeout is recorded the
  normal way.
- The transaction could not begin (the database away, a pooled connection cut) or the commit
  did not happen: not the handler's failure. The attempt starts again in a new transaction
  once the database answers, its lease kept meanwhile (the wait counts toward its timeout).
  A commit whose reply was lost is read back: the run's row says whether it committed.

Rules, checked when the task is declared: `transactional=True` implies `pass_context=True`
(the handler takes `ctx` first); the handler must be a plain `def` (it runs on a worker
thread, like every sync handler, with a sync connection; an `async def` is refused); and
`isolation="process"` is refused (the transaction lives in the worker process).

The commit gate. The worker's loop may decide an attempt while its thread is committing (the
timeout timer fires, or a heartbeat that waited for the commit's row lock reports the run as
no longer running). Once the token-checked UPDATE has succeeded the row is ours and the
commit decides, so the worker asks `committing(key)` before recording a timeout or a lost
lease: True means "leave it to the thread". An attempt the loop decided first can no longer
enter its commit (it rolls back).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .errors import ConfigurationError, DatabaseError, DatabaseTransient
from .serialization import encode_result
from .stores.sqlstore.handler_tx import CommitUnknown

if TYPE_CHECKING:
    from .stores.base import Store
    from .tasks import RunContext, Task, TaskOptions

log = logging.getLogger("rota.worker")

#: The outcome kind of an attempt whose success was committed with the handler's writes.
COMMITTED = "committed"

_RUNNING, _COMMITTING, _CLOSED = "running", "committing", "closed"

#: Called on the handler's thread after each sync handler (plain or transactional) returns
#: or raises: rota.contrib.django closes Django's stale connections there, as Django does
#: after each request. Empty unless an integration adds to it.
AFTER_SYNC_CALL: list[Any] = []


def after_sync_call() -> None:
    """Run the AFTER_SYNC_CALL callbacks (an exception is logged, never raised)."""
    for callback in AFTER_SYNC_CALL:
        try:
            callback()
        except Exception:
            log.exception("after-call cleanup %r failed", callback)


_AGAIN = "again"  # the transaction did not begin or did not commit: not the handler's failure
_states: dict[object, str] = {}
_states_lock = threading.Lock()


class _Rollback(Exception):
    """Roll the handler's transaction back; `kind` is the attempt's outcome."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def check_options(opts: TaskOptions) -> None:
    """Validate `transactional=` against the other task options (TaskOptions calls this)."""
    if not isinstance(opts.transactional, bool):
        raise ConfigurationError(f"transactional must be True or False, got {opts.transactional!r}")
    if opts.isolation == "process":
        raise ConfigurationError(
            "transactional=True cannot be combined with isolation='process': the handler's "
            "transaction lives in the worker process; use isolation='none' (the default)"
        )
    object.__setattr__(opts, "pass_context", True)  # the handler needs ctx.connection


def check_handler(name: str, fn: Any, opts: TaskOptions) -> None:
    """Refuse an `async def` transactional handler (App registers tasks through this)."""
    import inspect

    if opts.transactional and inspect.iscoroutinefunction(fn):
        raise ConfigurationError(
            f"task {name!r}: transactional=True needs a plain `def` handler, got an `async def`: it "
            "runs on a worker thread inside a transaction on a sync connection (ctx.connection). "
            "Declare it with `def`; do any async I/O in another task"
        )


def call_transactional(
    store: Store,
    task: Task[Any, Any],
    ctx: RunContext,
    args: list[Any],
    kwargs: dict[str, Any],
    *,
    timeout: float | None,
    key: object,
    stop: threading.Event | None = None,
) -> tuple[str, Any]:
    """On a worker thread: run the handler in a store transaction that also records its
    success. Returns (COMMITTED, result), ("timeout", None), ("lost", None), ("cancelled",
    None: `stop` was set while the database was away) or ("error", exc).

    A transaction that could not begin (the database away, a pooled connection cut) or whose
    commit did not happen (read back after a lost reply) is not the handler's failure: the
    attempt starts again in a new transaction once the database answers, its lease kept by the
    worker meanwhile (the run is in flight), until `stop` is set or its timeout passes."""
    deadline = None if timeout is None else time.monotonic() + timeout
    stop = threading.Event() if stop is None else stop
    with _states_lock:
        _states[key] = _RUNNING
    try:
        for tries, pause in enumerate(_pauses()):
            kind, value = _attempt(store, task, ctx, args, kwargs, deadline, key, stop)
            if kind != _AGAIN:
                return kind, value
            if tries == 1:
                log.warning("run %s (%s): its transaction could not begin or commit (%s); the handler's writes, if any, "
                            "were rolled back: the attempt starts again when the database answers (not counted)",
                            ctx.run_id, task.name, value)  # fmt: skip
            with _states_lock:
                if _states.get(key) == _COMMITTING:  # read back: not committed; the loop may decide again
                    _states[key] = _RUNNING
            if stop.wait(pause):
                return "cancelled", None  # shutdown, cancellation, lost lease or timeout: decided by the loop
            if deadline is not None and time.monotonic() >= deadline:
                return "timeout", None
        raise AssertionError("unreachable")  # _pauses() never ends
    finally:
        ctx._connection = None
        with _states_lock:
            _states.pop(key, None)
        if AFTER_SYNC_CALL:
            after_sync_call()


def _attempt(
    store: Store,
    task: Task[Any, Any],
    ctx: RunContext,
    args: list[Any],
    kwargs: dict[str, Any],
    deadline: float | None,
    key: object,
    stop: threading.Event,
) -> tuple[str, Any]:
    """One transaction: (_AGAIN, error) if it did not begin, or failed after the handler
    returned without committing (the handler's writes rolled back); otherwise the attempt's
    outcome."""
    handler = False  # while the handler runs, a database error is its own
    result: str | None = None
    try:
        with store.handler_transaction() as tx:
            handler = True
            ctx._connection = tx.connection
            if ctx._durable is not None:  # steps checkpoint in this transaction
                ctx._durable.in_transaction(tx.connection)
            result = encode_result(task.name, task.fn(ctx, *args, **kwargs))
            handler = False
            if not tx.succeed(int(ctx.run_id), ctx.token, result):
                raise _Rollback("lost")  # the token no longer holds the run
            if deadline is not None and time.monotonic() >= deadline:
                raise _Rollback("timeout")
            if not _enter_commit(key):
                raise _Rollback("lost")  # the worker decided first (timed out, lease lost)
        return COMMITTED, result
    except _Rollback as rollback:
        if rollback.kind == "lost":
            log.warning(
                "run %s (%s): rolled back: token %s no longer holds the run (its lease was lost) "
                "or the worker already recorded its end",
                ctx.run_id,
                task.name,
                ctx.token,
            )
        return rollback.kind, None
    except CommitUnknown as exc:
        return _read_back(store, ctx, result, stop, exc)
    except DatabaseTransient as exc:  # rota's own statement (begin, succeed): not committed
        return ("error", exc) if handler else (_AGAIN, exc)
    except BaseException as exc:
        return "error", exc
    finally:
        ctx._connection = None


def _read_back(
    store: Store, ctx: RunContext, result: str | None, stop: threading.Event, exc: Exception
) -> tuple[str, Any]:
    """The commit's reply was lost: did it commit? The token-checked success was in the same
    transaction, so the run's row tells: succeeded under this token (committed), still running
    under it (rolled back: _AGAIN), or someone else's now (lost). Read once the database
    answers (the loop leaves the attempt to this thread meanwhile: it is committing)."""
    log.warning("run %s (%s): %s; reading the run back to learn whether it committed", ctx.run_id, ctx.task, exc)
    for pause in _pauses():
        try:
            row = store.handler_outcome(int(ctx.run_id))  # waits for that transaction to end
        except DatabaseError:
            if stop.wait(pause):
                return "cancelled", None
            continue
        if row == ("succeeded", ctx.token):
            return COMMITTED, result
        if row == ("running", ctx.token):
            return _AGAIN, exc
        return "lost", None
    raise AssertionError("unreachable")  # _pauses() never ends


def _pauses() -> Iterator[float]:
    """Pauses between tries while the database is away: the first try again at once (a
    pooled connection cut meanwhile), then doubling up to 2 s."""
    yield 0.0
    pause = 0.05
    while True:
        yield pause
        pause = min(2.0, pause * 2)


def _enter_commit(key: object) -> bool:
    with _states_lock:
        if _states.get(key) == _CLOSED:
            return False
        _states[key] = _COMMITTING
        return True


def committing(key: object) -> bool:
    """For the worker's loop, before it records a timeout or a lost lease: True if the
    attempt is committing (its thread's commit decides; record nothing). Otherwise the
    attempt can no longer commit and the caller decides it."""
    with _states_lock:
        state = _states.get(key)
        if state == _COMMITTING:
            return True
        if state == _RUNNING:
            _states[key] = _CLOSED
        return False


__all__ = [
    "AFTER_SYNC_CALL",
    "COMMITTED",
    "after_sync_call",
    "call_transactional",
    "check_handler",
    "check_options",
    "committing",
]
