"""Durable steps (issue 43): `ctx.step`, `ctx.sleep`, `ctx.wait_for`, `ctx.progress` and
`App.signal`. The small model, not a replay runtime:

- A step's result is saved (rota_steps, JSON) the first time it succeeds, by the worker whose
  fencing token holds the run: the save reads the run's token in the same statement, so a
  worker whose lease was taken over saves nothing, and its handler is stopped
  (`StepRefused`) before it can use that result. A later execution of the handler (a retry,
  a rescue after a crash, a hand-back, a resume after a park) calls the same steps in the
  same order and gets the saved results back without running them again. The step that was
  running when a worker died has no checkpoint and runs again. `step` returns once its
  checkpoint committed (the store writes the checkpoints of concurrent runs together:
  rota/stores/sqlstore/checkpoints.py), except a step the handler returns at once: that one
  is written in the transaction of the run's outcome (`deferred`, Outcome.steps).
- `ctx.sleep` and `ctx.wait_for` park the run: the handler's execution ends (the `Parked`
  exception, which handlers must not swallow: it derives from BaseException), the run goes
  back to pending, due when the wait ends, with no token, no lease, no worker slot and no
  limit slot; a signal makes it due at once. Any worker resumes it by running the handler
  again from the top: everything before the wait is either a saved step (skipped) or plain
  code (run again).
- Everything else in the handler runs again on every execution: keep side effects inside
  steps.

Bounds (one clear error each, `StepError`): a step name is 1 to 200 characters, not ending in a
space, and used once per run; at most MAX_STEPS steps, sleeps and waits per run; a step's result must encode as
JSON; a sleep or a wait's timeout lasts at most MAX_WAIT.
"""

from __future__ import annotations

import asyncio
import contextlib
import dis
import inspect
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from . import quarantine
from .errors import ConfigurationError, RotaError, SerializationError
from .serialization import encode_error, encode_result

if TYPE_CHECKING:
    from .stores.sqlstore.durable import StepRecord

MAX_STEPS = 1000  # steps, sleeps and waits in one run
MAX_NAME = 200  # characters of a step's or a signal's name
MAX_WAIT = timedelta(days=366)  # the longest sleep, and a wait's longest timeout (also its default)
MAX_MESSAGE = 500  # characters of a progress message

WAITING = "waiting"  # rota_steps.outcome of a sleep or wait that has parked the run
SUCCEEDED, FAILED = "succeeded", "failed"


class StepError(ConfigurationError):
    """A step used wrongly: a name repeated in a run, a result that is not JSON, more steps
    than MAX_STEPS, a bad name, duration or timeout, or a call where steps are unavailable."""


class StepRefused(RotaError):
    """The run's lease is no longer this worker's (another worker took it over): a checkpoint
    was refused, and the handler is stopped so that its result is not used."""


class Parked(BaseException):
    """Ends a handler's execution to park its run (ctx.sleep, ctx.wait_for). Not an error:
    derived from BaseException so that `except Exception` in a handler lets it through."""

    def __init__(self, kind: str, name: str | None, wake_in: float, since: datetime | None = None,
                 until: datetime | None = None) -> None:  # fmt: skip
        super().__init__(f"parked ({kind}{'' if name is None else ' ' + repr(name)}) for {wake_in:.3f} s")
        self.kind = kind
        self.name = name
        self.wake_in = wake_in
        # when the wait began and ends, from one reading of the database's clock (rota_waits)
        self.since = since
        self.until = until

    def stored(self) -> str:
        """The park as its outcome's result carries it to the store ([kind, name, since, until])."""
        return json.dumps([self.kind, self.name, _iso(self.since), _iso(self.until)])


@dataclass(frozen=True, slots=True)
class Signal:
    """A signal a run received (App.signal): `ctx.wait_for` returns it (None on timeout)."""

    name: str
    payload: Any
    sent_at: datetime | None


def check_name(name: object, what: str = "step") -> str:
    # not ending in a space: MySQL/MariaDB compare names without their trailing spaces ('a' and
    # 'a ' are one row there), refused on every store so that a handler means the same on each
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME or name.endswith(" "):
        raise StepError(
            f"invalid {what} name {shown(name)}: a non-blank string of at most {MAX_NAME} characters, "
            "not ending in a space"
        )
    return name


def shown(value: object, width: int = 60) -> str:
    """`value`'s repr for an error's one line: a long one is cut, with its length."""
    text = repr(value)
    if len(text) <= width:
        return text
    size = f" ({len(value)} characters)" if isinstance(value, str) else ""
    return f"{text[:width]}...{size}"


def seconds_of(delta: object, what: str) -> float:
    """A sleep's duration or a wait's timeout in seconds (timedelta or seconds), checked."""
    if isinstance(delta, timedelta):
        seconds = delta.total_seconds()
    elif isinstance(delta, int | float) and not isinstance(delta, bool):
        seconds = float(delta)
    elif isinstance(delta, datetime):  # a point in time, naive or not: the time left is asked for
        raise StepError(
            f"invalid {what} {delta!r}: a timedelta or a number of seconds, not a datetime (to wait until a "
            "time, pass the time left: until - datetime.now(UTC), with an aware until)"
        )
    else:
        raise StepError(f"invalid {what} {delta!r}: a timedelta or a number of seconds")
    if not 0 <= seconds <= MAX_WAIT.total_seconds():
        raise StepError(f"invalid {what} {delta!r}: from 0 to {MAX_WAIT.days} days")
    return seconds


class Durable:
    """One execution's view of its run's steps: the saved ones (read once, on the first
    step), the names used so far, and the progress waiting for the next heartbeat."""

    def __init__(self, store: Any, run_id: int, token: int, task: str, connection: Any = None,
                 steps: bool = True, handler: Any = None) -> None:  # fmt: skip
        self.store = store
        self.run_id = run_id
        self.token = token
        self.task = task
        self.connection = connection  # a transactional handler's: checkpoints in its transaction
        # False: the claim saw no saved step, and only this token's holder saves: none to read
        self.steps = steps
        # the handler's code (the function the worker calls): a step it returns at once is
        # written with the run's finish (`deferred`; see `_returns_at_once`)
        self.handler = handler
        self.deferred: dict[str, Any] | None = None
        self._saved: dict[str, StepRecord] | None = None
        self._seen: set[str] = set()
        self._sleeps = 0
        self.progress: tuple[float, str | None] | None = None  # taken by the next heartbeat

    def in_transaction(self, connection: Any) -> None:
        """A transactional handler's (new) transaction: its steps checkpoint there, and a
        transaction begun again starts the handler over (what the last one saved rolled back)."""
        self.connection = connection
        self._saved = None
        self._seen.clear()
        self._sleeps = 0

    # -- bookkeeping ---------------------------------------------------------------------
    def _use(self, name: str) -> int:
        if name in self._seen:
            raise StepError(
                f"step name {name!r} is used twice in run {self.run_id} of {self.task}: each step of a run "
                "needs its own name (in a loop, add the index: f'charge-{i}')"
            )
        if len(self._seen) >= MAX_STEPS:
            raise StepError(
                f"run {self.run_id} of {self.task} passed {MAX_STEPS} steps, sleeps and waits at step {name!r} "
                f"(rota.durable.MAX_STEPS): split the work into several runs"
            )
        self._seen.add(name)
        return len(self._seen) - 1

    def saved(self, name: str) -> StepRecord | None:
        if self._saved is None:  # read once, unless the claim said there is nothing to read
            self._saved = {s.name: s for s in self.store.steps_of(self.run_id)} if self.steps else {}
        return self._saved.get(name)

    def save(self, name: str, seq: int, outcome: str, took: float, result: str | None = None,
             error: str | None = None) -> None:  # fmt: skip
        """The checkpoint, fenced by the token; refused: StepRefused (the handler stops)."""
        from .stores.sqlstore.durable import StepRecord

        record = StepRecord(name, seq, 0, None, None, outcome, result, error)
        if self.connection is not None:
            with self.store.foreign_session(self.connection) as s:
                ok = self.store.save_step(self.run_id, self.token, record, took, session=s)
        else:
            ok = self.store.save_step(self.run_id, self.token, record, took)
        if not ok:
            raise StepRefused(
                f"run {self.run_id} ({self.task}): the checkpoint of step {name!r} was refused: token {self.token} "
                "no longer holds the run (its lease was taken over by another worker); this execution stops "
                "and its result is not used"
            )
        if self._saved is not None and outcome != FAILED:
            self._saved[name] = record

    def encode(self, name: str, value: Any) -> str:
        try:
            return encode_result(self.task, value, label="the value")
        except (SerializationError, TypeError, ValueError) as exc:
            raise StepError(
                f"the result of step {name!r} of {self.task} (run {self.run_id}) cannot be saved as JSON: {exc}"
            ) from None

    # -- steps ---------------------------------------------------------------------------
    def begin(self, name: object) -> tuple[str, int, StepRecord | None]:
        self.flush()
        name = check_name(name)
        seq = self._use(name)
        saved = self.saved(name)
        return name, seq, saved if saved is not None and saved.outcome == SUCCEEDED else None

    def end(self, name: str, seq: int, started: float, value: Any, last: bool = False) -> Any:
        text = self.encode(name, value)
        took = time.monotonic() - started
        if last:  # the handler returns it at once: its checkpoint goes with the run's finish
            self.deferred = {"id": self.run_id, "token": self.token, "name": name, "seq": seq, "took": took,
                             "outcome": SUCCEEDED, "result": text, "error": None}  # fmt: skip
        else:
            self.save(name, seq, SUCCEEDED, took, result=text)
        return json.loads(text)  # what a resume gets back: the same JSON

    def flush(self) -> None:
        """Save a deferred checkpoint now (the handler went on after all: a defensive case)."""
        row, self.deferred = self.deferred, None
        if row is not None:
            self.save(row["name"], row["seq"], SUCCEEDED, row["took"], result=row["result"])

    def _last(self) -> bool:
        """Whether the step being called is the last thing its handler does: the worker's own
        handler function (not a transactional one), returning the step's value (or None) at
        once, with nothing (no `finally`, no `with` exit) in between."""
        if self.handler is None or self.connection is not None:
            return False
        try:
            frame = sys._getframe(3)  # the handler, calling RunContext.step, calling step, calling us
        except ValueError:  # a shallower stack: not a worker's handler
            return False
        return frame.f_code is self.handler and _returns_at_once(frame.f_code, frame.f_lasti)

    def failed(self, name: str, seq: int, started: float, exc: BaseException) -> None:
        # not the step's failure: a park, a lost lease, a misuse, or an async step cancelled
        # (a shutdown's hand-back or the run's timeout): not saved, the step runs again
        if isinstance(exc, Parked | StepRefused | StepError | asyncio.CancelledError):
            return
        with contextlib.suppress(StepRefused):  # the handler's own exception says more; the finish is fenced
            self.save(name, seq, FAILED, time.monotonic() - started, error=encode_error(exc))

    def step(self, name: object, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        name, seq, saved = self.begin(name)
        if saved is not None:
            return self.stored(saved.result, f"step {name!r}", "result")
        last = self._last()
        started = time.monotonic()
        try:
            value = fn(*args, **kwargs)
        except BaseException as exc:
            self.failed(name, seq, started, exc)
            raise
        return self.end(name, seq, started, value, last)

    async def step_async(self, name: object, fn: Callable[..., Any], args: tuple[Any, ...],
                         kwargs: dict[str, Any]) -> Any:  # fmt: skip
        checked, seq, saved = await asyncio.to_thread(self.begin, name)
        if saved is not None:
            return self.stored(saved.result, f"step {checked!r}", "result")
        started = time.monotonic()
        try:
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
        except BaseException as exc:
            await asyncio.to_thread(self.failed, checked, seq, started, exc)
            raise
        return await asyncio.to_thread(self.end, checked, seq, started, value)

    # -- parks ---------------------------------------------------------------------------
    def _no_transaction(self, what: str) -> None:
        self.flush()
        if self.connection is not None:
            raise StepError(
                f"{what} in {self.task}, a transactional task: its transaction would stay open for the whole "
                "wait. Wait in a plain task and enqueue the transactional part after it (after=, or from a step)"
            )

    def sleep(self, delta: object, name: str | None = None) -> None:
        self._no_transaction("ctx.sleep")
        seconds = seconds_of(delta, "sleep duration")
        self._sleeps += 1
        name = check_name(name or f"sleep#{self._sleeps}")
        self._wait("sleep", name, None, seconds)

    def wait_for(self, signal: object, timeout: object = None) -> Signal | None:
        self._no_transaction("ctx.wait_for")
        signal = check_name(signal, "signal")
        seconds = MAX_WAIT.total_seconds() if timeout is None else seconds_of(timeout, "wait timeout")
        name = f"wait:{signal}"
        if name in self._seen:
            raise StepError(
                f"ctx.wait_for({signal!r}) is called twice in run {self.run_id} of {self.task} (or a step is named "
                f"{name!r}): a run waits once per signal name, and keeps the first signal of a name; wait for "
                "another name the second time"
            )
        saved = self.saved(name)
        if saved is None or saved.outcome != SUCCEEDED:
            sent = self.store.signal_of(self.run_id, signal)
            if sent is not None:
                seq = self._use(name)
                kept = {"signal": self.stored(sent[0], f"signal {signal!r}", "payload"), "sent_at": _iso(sent[1])}
                self.save(name, seq, SUCCEEDED, 0.0, result=json.dumps(kept))
                self.store.unpark(self.run_id, self.token)
                return Signal(signal, kept["signal"], sent[1])
        got = self._wait("signal", name, signal, seconds)
        if got is None or "signal" not in got:
            return None
        return Signal(signal, got["signal"], self.time_in(got, "sent_at", f"step {name!r}"))

    def _wait(self, kind: str, name: str, signal: str | None, seconds: float) -> dict[str, Any] | None:
        """Pass a sleep or wait that is over (its result), or park the run until it is."""
        seq = self._use(name)
        saved = self.saved(name)
        if saved is not None and saved.outcome == SUCCEEDED:
            done: dict[str, Any] | None = self.stored_object(saved.result, f"step {name!r}", "result", None)
            return done
        now, holding = self.store.step_clock(self.run_id, self.token)
        if not holding:
            raise StepRefused(f"run {self.run_id} ({self.task}): token {self.token} no longer holds the run")
        if saved is None or saved.outcome != WAITING:
            since, until = now, now + timedelta(seconds=seconds)  # one clock reading for both
            self.save(name, seq, WAITING, 0.0, result=json.dumps({"until": _iso(until), "since": _iso(since)}))
        else:  # parked before: its wait's own start and end
            since, until = self.began(saved, now)
        if now >= until:
            done = {"timeout": True} if kind == "signal" else {"slept_until": _iso(until)}
            self.save(name, seq, SUCCEEDED, 0.0, result=json.dumps(done))
            self.store.unpark(self.run_id, self.token)
            return done
        self._progress_now()
        raise Parked(kind, signal, (until - now).total_seconds(), since, until)

    def _progress_now(self) -> None:
        """Write the progress set since the last heartbeat before the run parks: a parked run
        has no heartbeat to carry it (fenced by the token as the heartbeat's write)."""
        if self.progress is not None:
            (fraction, message), self.progress = self.progress, None
            self.store.save_progress([(self.run_id, self.token, fraction, message)])

    # -- stored values: a saved step's result or a signal's payload that cannot be used (a
    # damaged row: rota.quarantine) ends the run as damaged, never retried (DamagedRun)
    def damaged(self, row: str, reason: str) -> quarantine.DamagedRun:
        return quarantine.DamagedRun(f"{row} of run {self.run_id} ({self.task}): {reason}")

    def stored(self, text: str | None, row: str, field: str) -> Any:
        try:
            return json.loads(text or "null")
        except (ValueError, RecursionError) as exc:  # not JSON, or nested too deeply to decode
            raise self.damaged(row, f"stored {field} is not valid JSON ({quarantine.describe(exc)})") from None

    def stored_object(self, text: str | None, row: str, field: str, empty: Any) -> Any:
        """A stored JSON object (a wait's saved start and end, or how it ended); `empty`: none stored."""
        value = self.stored(text, row, field)
        if value is None:
            return empty
        if not isinstance(value, dict):
            raise self.damaged(row, f"stored {field} {shown(text)} is not a JSON object")
        return value

    def time_in(self, stored: dict[str, Any], key: str, row: str) -> datetime | None:
        """An aware time in a saved step's result (None: not stored, as an older release's)."""
        value = stored.get(key)
        if value is None:
            return None
        try:
            moment = datetime.fromisoformat(value)
            if moment.tzinfo is None:
                raise ValueError("no time zone")
            return moment.astimezone(UTC)  # (in UTC: an offset may carry it past year 9999 or before 1)
        except (TypeError, ValueError, OverflowError) as exc:
            raise self.damaged(row, f"stored result's {key} {shown(value)} is not a time ({exc})") from None

    def began(self, saved: StepRecord, now: datetime) -> tuple[datetime | None, datetime]:
        """A parked wait's start and end, as its first execution saved them (no end: over now)."""
        row = f"step {saved.name!r}"
        began = self.stored_object(saved.result, row, "result", {})
        until = self.time_in(began, "until", row) or now
        if until - now > MAX_WAIT + timedelta(days=1):  # no wait rota parks lasts longer
            raise self.damaged(row, f"stored result's until {_iso(until)} is more than {MAX_WAIT.days} days away")
        return self.time_in(began, "since", row) or saved.started_at, until

    # -- progress ------------------------------------------------------------------------
    def set_progress(self, fraction: object, message: object = None) -> None:
        if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 <= fraction <= 1:
            raise StepError(f"invalid progress fraction {fraction!r}: a number from 0 to 1")
        if message is not None and (not isinstance(message, str) or len(message) > MAX_MESSAGE):
            raise StepError(f"invalid progress message {shown(message)}: a string of at most {MAX_MESSAGE} characters")
        self.progress = (float(fraction), message)


_AT_ONCE: dict[tuple[Any, int], bool] = {}
# The call itself: positional, with keywords (3.13: CALL_KW), with *args or **kwargs
_CALLS = frozenset({"CALL", "CALL_KW", "CALL_FUNCTION_EX"})
# After the call: return its value; or drop it and return a constant (3.11: LOAD_CONST; 3.12, 3.13: RETURN_CONST)
_RETURNS = (("RETURN_VALUE",), ("POP_TOP", "RETURN_CONST"), ("POP_TOP", "LOAD_CONST", "RETURN_VALUE"))


def _returns_at_once(code: Any, lasti: int) -> bool:
    """Whether the instructions after the call at `lasti` in `code` only return. `lasti` (the
    frame's f_lasti) is the offset of the call's last inline cache entry on 3.11 and 3.12, of
    the call itself on 3.13: either way the call is the last instruction at or before it (dis
    lists no cache entries). Anything unrecognised (another interpreter, a bytecode this does
    not know) answers False: the step is then committed before the handler goes on, as any
    other step is (one group commit more, never a lost checkpoint)."""
    known = _AT_ONCE.get((code, lasti))
    if known is None:
        known = _AT_ONCE[(code, lasti)] = sys.implementation.name == "cpython" and _only_returns(code, lasti)
    return known


def _only_returns(code: Any, lasti: int) -> bool:
    instructions = list(dis.get_instructions(code))
    upto = [i for i in instructions if i.offset <= lasti]
    if not upto or upto[-1].opname not in _CALLS:
        return False
    names = tuple(i.opname for i in instructions if i.offset > lasti)[:3]
    return any(names[: len(r)] == r for r in _RETURNS)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


__all__ = ["MAX_STEPS", "MAX_WAIT", "Durable", "Parked", "Signal", "StepError", "StepRefused"]
