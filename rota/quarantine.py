"""Quarantine: the one rule for a stored row that rota cannot use.

A row can be damaged: written by an older release, edited by hand, left by a bad migration or
a hostile peer. Decoding it, planning it or doing arithmetic on it must never stop other work.
Every place that meets such a row does three things, always the same way:

1. **Set it aside.** A run that cannot be worked ends `failed` with an error of type
   `DamagedRow` (never retried: its next attempt would meet the same damage); a schedule is
   skipped by every worker's ticker until it is repaired; a worker's or lock's registry row is
   listed with what is damaged. Batch statements (claims, sweeps) guard their arithmetic in SQL
   so that one bad member cannot fail the whole batch. A call that needs the row itself
   (`rota trigger` of a damaged schedule, `rota retry` of a task whose stored spec is damaged)
   is refused with `DamagedRowError`: one line naming the row, the damage and the repair.
2. **Name it in one line**: `report()` logs one warning (event `row_damaged`) per row and
   reason per process, naming the kind, the row and the reason, so a fleet's logs point at it
   once rather than once per poll.
3. **Show it**: `Run.corrupt`, `ScheduleInfo.corrupt` and the listings' `corrupt` fields name
   the damaged fields; `rota runs --damaged` lists the runs set aside. The Concepts page
   "Damaged rows" says what an operator does with each kind (repair it, or delete it).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Final

from .errors import RotaError
from .logs import log_event

log = logging.getLogger("rota.quarantine")

RUN: Final = "run"
SCHEDULE: Final = "schedule"
WORKER: Final = "worker"
LOCK: Final = "lock"
TASK_SPEC: Final = "task spec"
COUNTER: Final = "counter"
LIMIT: Final = "limit"
RATE: Final = "rate"
QUEUE_PAUSE: Final = "queue pause"
# a run's durable rows (rota.durable): its saved steps, its park's wait, its signals, its progress
STEP: Final = "step"
WAIT: Final = "wait"
SIGNAL: Final = "signal"
PROGRESS: Final = "progress"
KINDS: Final = (RUN, SCHEDULE, WORKER, LOCK, TASK_SPEC, COUNTER, LIMIT, RATE, QUEUE_PAUSE, STEP, WAIT, SIGNAL, PROGRESS)

# The error type a run set aside as damaged ends with (Run.error["type"]); `rota runs --damaged`
# and the dashboard's filter look for it.
ERROR_TYPE: Final = "DamagedRow"
EVENT: Final = "row_damaged"

# Decoding a damaged stored value raises one of these: a time out of Python's range
# (ValueError, OverflowError, OSError from fromtimestamp), a value of the wrong type, JSON nested
# deeper than the decoder's recursion limit (RecursionError), a missing key of a stored spec.
UNDECODABLE: Final = (ValueError, OverflowError, OSError, TypeError, RecursionError, KeyError, AttributeError)


class DamagedRowError(RotaError):
    """A call needs a stored row that is damaged (a task's stored limit and rate spec that
    does not decode, a schedule that cannot be planned): one line naming the row, the
    damage and the repair; nothing is written."""


class DamagedRun(Exception):
    """Raised while a run is worked, when a stored row of its own that its handler needs
    cannot be used (its stored arguments, a saved step's result, a signal's payload): the
    worker ends the run failed as damaged (error type DamagedRow), never retried. The message
    is the one-line reason, naming the row and the field."""


_named: set[tuple[str, str, str]] = set()
_named_lock = threading.Lock()
# a process that meets many damaged rows names the first ones and then only counts the rest
_MAX_NAMED: Final = 10_000


def report(kind: str, key: object, reason: str, **fields: Any) -> bool:
    """Log, once per process for this row and reason, that a damaged row is set aside.

    `kind` is one of KINDS, `key` the row's id or name, `reason` what is wrong with it, in
    words an operator can act on ("attempt 2147483647 is at its column's maximum"). Returns
    True when this call logged (the first time), False when it had been named already."""
    entry = (kind, str(key), reason)
    with _named_lock:
        if entry in _named:
            return False
        if len(_named) < _MAX_NAMED:
            _named.add(entry)
    message = f"damaged {kind} {str(key)!r} set aside: {reason}; the rest goes on (see 'Damaged rows' in the docs)"
    log_event(log, logging.WARNING, EVENT, message, kind=kind, key=str(key), reason=reason, **fields)
    return True


def describe(exc: BaseException) -> str:
    """One line for what a decoder raised (no traceback: the row, not the code, is at fault)."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def run_error(reason: str) -> dict[str, Any]:
    """The stored error of a run set aside as damaged (what Run.error reads back)."""
    return {
        "type": ERROR_TYPE,
        "message": f"damaged row: {reason}; not retried (repair the row and `rota retry` it, or delete it)",
        "traceback": None,
    }


def reason_of(message: str) -> str:
    """The reason in a stored run_error message (as written by SQL that ends runs as damaged)."""
    head, tail = "damaged row: ", "; not retried"
    body = message[len(head) :] if message.startswith(head) else message
    return body.split(tail)[0]


def forget() -> None:
    """Forget which rows were named (tests; a long-lived process never needs it)."""
    with _named_lock:
        _named.clear()
