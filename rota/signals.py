"""App.signal and the durable fields of App.get_run (rota/durable.py has the handler's side).

`app.signal(run_id, name, payload)` keeps the signal for the run (rota_signals): sent before
the run waits for it, it is there when `ctx.wait_for(name)` comes; sent while the run is parked
waiting for it, the run is due at once (and PostgreSQL's NOTIFY wakes an idle worker). The
first signal of a name per run is kept; a second is answered `stored=False`. A signal to a
finished run raises SignalRefused, to an unknown one RunNotFound. With `connection=` it is
written in the caller's transaction (as transactional enqueue is): kept and woken at commit.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from . import quarantine, undeclared
from .durable import StepError, check_name
from .errors import RotaError, RunNotFound, SerializationError
from .models import parse_run_id
from .serialization import encode_result
from .stores.sqlstore.durable import SignalAnswer, drive_signal, drive_signal_async, signal_steps

if TYPE_CHECKING:
    from .models import Run
    from .stores.base import Store


class SignalRefused(RotaError):
    """A signal to a run that can no longer receive it (it is final)."""


@dataclass(frozen=True, slots=True)
class SignalSent:
    """What App.signal did: `stored` (kept for the run; False: a signal of that name was
    already sent to it, and the first is kept) and `woken` (the run was parked waiting for it
    and is due now)."""

    run_id: str
    name: str
    stored: bool
    woken: bool


class SignalClient:
    """App.signal / signal_async, and the steps, wait and progress shown by get_run."""

    _store: Store

    @property
    def store(self) -> Store:
        raise NotImplementedError  # App.store

    def signal(self, run_id: str | int, name: str, payload: Any = None, *, connection: Any = None) -> SignalSent:
        """Send signal `name` (JSON `payload`) to a run: see the module's docstring."""
        rid, name, text = _checked(run_id, name, payload)
        _supported(self._store)
        if connection is not None:
            from .txn import _check_dialect, dbapi_connection

            raw = dbapi_connection(connection)
            _check_dialect(self._store.dialect, raw)
            with self._store.foreign_session(raw) as s:
                answer = drive_signal(s, signal_steps(rid, name, text))
        else:
            answer = self.store.signal(rid, name, text)  # type: ignore[attr-defined]
        return _sent(rid, name, answer)

    async def signal_async(self, run_id: str | int, name: str, payload: Any = None, *,
                           connection: Any = None) -> SignalSent:  # fmt: skip
        rid, name, text = _checked(run_id, name, payload)
        if connection is not None:
            from .txn import _check_dialect, _from_sqlalchemy_async, dbapi_connection, is_async_psycopg

            raw = dbapi_connection(await _from_sqlalchemy_async(connection))
            if is_async_psycopg(raw):
                _check_dialect(self._store.dialect, raw)
                async with self._store.async_foreign_session(raw) as s:
                    return _sent(rid, name, await drive_signal_async(s, signal_steps(rid, name, text)))
        return await asyncio.to_thread(self.signal, run_id, name, payload, connection=connection)

    def _with_waits(self, runs: list[Run]) -> list[Run]:
        """A page of runs, the parked ones with their waits (one statement for the page)."""
        waits = parked_waits(self.store, [int(r.id) for r in runs if r.status == "pending"])
        return [replace(r, waiting=waits[int(r.id)]) if int(r.id) in waits else r for r in runs]

    def _with_durable(self, run: Run) -> Run:
        """The run with its steps, its wait (if parked) and its progress."""
        fields = durable_fields(self.store, int(run.id), run.status)
        if not fields["steps"] and fields["waiting"] is None and fields["progress"] is None:
            return run
        return replace(run, **fields)


def durable_fields(store: Any, run_id: int, status: str) -> dict[str, Any]:
    """A run's steps, wait (a parked run's, or a limit or rate no worker declared) and
    progress, as Run and the JSON API show them."""
    if not getattr(store, "durable_supported", False):
        return {"steps": [], "waiting": undeclared.waiting_of(store, run_id) if status == "pending" else None,
                "progress": None}  # fmt: skip
    steps = [_step_json(run_id, s) for s in store.steps_of(run_id)]
    waiting = _waiting(store, run_id) if status == "pending" else None
    got = store.progress_of(run_id)
    progress = None if got is None else {"fraction": got[0], "message": got[1], "at": _iso(got[2])}
    return {"steps": steps, "waiting": waiting, "progress": progress}


def _waiting(store: Any, run_id: int) -> dict[str, Any] | None:
    """What a pending run waits for: its park's sleep or signal, or, once that is over (or
    for any run over its rate), its rate's window (kind "rate": the rate's name and key), or
    a limit or rate that no worker declared (kind "undeclared": rota.undeclared)."""
    wait = store.wait_of(run_id)
    if wait is not None:
        return _wait_json(wait)
    rate = store.rate_wait_of(run_id)
    if rate is not None:
        return {"kind": "rate", "rate": rate[0], "key": rate[1] or None, "until": _iso(rate[2])}
    return undeclared.waiting_of(store, run_id)


def parked_waits(store: Any, run_ids: list[int]) -> dict[int, dict[str, Any]]:
    """The waits of the parked runs among `run_ids` (a listing's pending ones), as Run.waiting
    shows them: one statement for them all (no rate windows: App.get_run has those)."""
    if not run_ids or not getattr(store, "durable_supported", False):
        return {}
    return {i: _wait_json(w) for i, w in store.waits_of(run_ids).items()}


def _wait_json(wait: Any) -> dict[str, Any]:
    return {"kind": wait.kind, "signal": wait.name, "until": _iso(wait.until), "since": _iso(wait.since)}


def _supported(store: Any) -> None:
    if not getattr(store, "durable_supported", False):
        raise StepError(f"durable steps and signals are not available on the {store.dialect} store yet (issue 43)")


def _checked(run_id: str | int, name: str, payload: Any) -> tuple[int, str, str]:
    rid = parse_run_id(run_id)
    check_name(name, "signal")
    try:
        text = encode_result(f"signal {name!r}", payload, label=f"the payload of signal {name!r}")
    except (SerializationError, TypeError, ValueError) as exc:
        raise SerializationError(str(exc)) from None
    return rid, name, text


def _sent(rid: int, name: str, answer: SignalAnswer) -> SignalSent:
    if answer.stored:
        return SignalSent(str(rid), name, True, answer.woken)
    if answer.status is None:
        raise RunNotFound(f"no run with id {rid}: signal {name!r} not sent")
    if answer.status in ("pending", "running"):  # a signal of that name came first: it is kept
        return SignalSent(str(rid), name, False, False)
    raise SignalRefused(f"run {rid} is {answer.status}: it can no longer receive signal {name!r} (not sent)")


def _step_json(run_id: int, s: Any) -> dict[str, Any]:
    return {"name": s.name, "seq": s.seq, "attempt": s.attempt, "started_at": _iso(s.started_at),
            "finished_at": _iso(s.finished_at), "outcome": s.outcome, "error": _step_error(run_id, s)}  # fmt: skip


def _step_error(run_id: int, s: Any) -> dict[str, Any] | None:
    """A failed step's stored error; one that is not a JSON object (a damaged row) is shown as
    a DamagedRow error and named once (rota.quarantine)."""
    if s.error is None:
        return None
    try:
        error = json.loads(s.error)
    except (ValueError, RecursionError):
        error = None
    if isinstance(error, dict):
        return error
    reason = "stored error is not a JSON object"
    quarantine.report(quarantine.STEP, f"{run_id}/{s.name}", reason)
    return {"type": quarantine.ERROR_TYPE, "message": reason}


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat().replace("+00:00", "Z")
