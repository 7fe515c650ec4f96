"""The stores' side of durable steps (issue 43; rota/durable.py is the handler's side): step
checkpoints fenced by the run's token, parked runs (ctx.sleep, ctx.wait_for), signals and
progress. Four tables of their own (schema 22): rota_steps, rota_waits, rota_signals and
rota_progress; rota_runs gains no column.

Named `durable`, not `steps`: `steps.py` is the (query, params) generator driver that
enqueue and `signal_steps` below run on a sync or an async session."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Generator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ... import quarantine
from ..base import Outcome
from ..records import PARKED
from .base import NOTIFY_CHANNEL, Session, SqlBase
from .checkpoints import GroupCommit, finish_steps, rows_json

Row = tuple[Any, ...]
SignalSteps = Generator[tuple[str, dict[str, Any]], list[Row], "SignalAnswer"]


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One saved step of a run (rota_steps)."""

    name: str
    seq: int
    attempt: int
    started_at: datetime | None
    finished_at: datetime | None
    outcome: str  # succeeded | failed | waiting (another: a damaged row's, not a saved success)
    result: str | None  # JSON text (decoded, and checked, where the handler uses it: rota.durable)
    error: str | None  # JSON text


@dataclass(frozen=True, slots=True)
class WaitRecord:
    """A parked run's wait (rota_waits): kind 'sleep' or 'signal' (name: the signal's)."""

    kind: str
    name: str | None
    until: datetime | None  # None: its stored time cannot be read (named by rota.quarantine)
    since: datetime | None


@dataclass(frozen=True, slots=True)
class SignalAnswer:
    """What App.signal did: `stored` (kept for the run), `woken` (the run was parked waiting
    for it and is due now), or why not: `status` of the run (None: no such run), `duplicate`
    (a signal of that name was sent to the run before: the first is kept)."""

    stored: bool
    woken: bool
    status: str | None
    duplicate: bool


def signal_steps(run_id: int, name: str, payload: str) -> SignalSteps:
    """App.signal as (query, params) steps (rota/stores/_steps.py drives them on the store's
    session, a caller's connection, or an async one)."""
    params = {"id": run_id, "name": name}
    yield "signal_lock", params
    if (yield "signal_store", {**params, "payload": payload}):
        woken = bool((yield "signal_wake", params))
        if woken:
            yield "notify", {"channel": NOTIFY_CHANNEL, "payload": "run"}
        return SignalAnswer(True, woken, "pending" if woken else None, False)
    rows = yield "signal_status", params
    if not rows:
        return SignalAnswer(False, False, None, False)
    return SignalAnswer(False, False, str(rows[0][0]), bool(rows[0][1]))


def drive_signal(s: Session, steps: SignalSteps) -> SignalAnswer:
    try:
        query, params = next(steps)
        while True:
            query, params = steps.send(s.q(query, **params))
    except StopIteration as done:
        answer: SignalAnswer = done.value
        return answer


async def drive_signal_async(s: Any, steps: SignalSteps) -> SignalAnswer:
    try:
        query, params = next(steps)
        while True:
            query, params = steps.send(await s.q(query, **params))
    except StopIteration as done:
        answer: SignalAnswer = done.value
        return answer


class SqlDurable(SqlBase):
    """Steps, waits, signals and progress on a SQL store (all three have the statements). A
    backend without the durable statements shows no steps, keeps nothing to forget, and refuses
    `ctx.step` / `App.signal` with one clear error (`durable_supported`)."""

    @property
    def durable_supported(self) -> bool:
        return "save_step" in self.queries

    def steps_of(self, run_id: int) -> list[StepRecord]:
        with self._read() as s:
            rows = s.q("steps_of", id=run_id)
        return [self._step_from_row(run_id, r) for r in rows]

    # -- decoding: a damaged field of a durable row (rota.quarantine) reads as empty, named once;
    # a stored JSON value the handler uses is checked where it uses it (rota.durable)
    def _step_from_row(self, run_id: int, r: Row) -> StepRecord:
        key = f"{run_id}/{r[0]}"
        started, finished = self._durable_time(quarantine.STEP, key, r[3], "started_at"), \
            self._durable_time(quarantine.STEP, key, r[4], "finished_at")  # fmt: skip
        return StepRecord(str(r[0]), int(r[1]), int(r[2]), started, finished, str(r[5]), r[6], r[7])

    def _wait_from_row(self, run_id: int, r: Row) -> WaitRecord:
        kind = str(r[0])
        if kind not in ("sleep", "signal"):
            quarantine.report(quarantine.WAIT, run_id, f"stored kind {kind[:40]!r} is not 'sleep' or 'signal'")
        return WaitRecord(kind, r[1], self._durable_time(quarantine.WAIT, run_id, r[2], "until"),
                          self._durable_time(quarantine.WAIT, run_id, r[3], "since"))  # fmt: skip

    def _durable_time(self, kind: str, key: object, value: Any, field: str) -> datetime | None:
        """A time of a durable row; one that cannot be read (past year 9999, MySQL's zero date)
        reads as None and is named once: these times are shown, never computed with."""
        try:
            return self._dt(value)
        except quarantine.UNDECODABLE as exc:
            quarantine.report(kind, key, f"stored {field} cannot be read ({quarantine.describe(exc)}); shown empty")
            return None

    def step_clock(self, run_id: int, token: int) -> tuple[datetime, bool]:
        """The database's time, and whether (run_id, token) still holds the run."""
        with self._read() as s:
            row = s.q("step_clock", id=run_id, token=token)[0]
        now = self._dt(row[0])
        assert now is not None
        return now, bool(row[1])

    def save_step(self, run_id: int, token: int, step: StepRecord, took: float, session: Session | None = None) -> bool:
        """Save one step's checkpoint if (run_id, token) still holds the run; False: refused
        (the lease was lost, or the step had succeeded before). Returns once it committed.
        `session`: a transactional handler's (its transaction: commits with its writes);
        without one, the checkpoints this process makes meanwhile are written together
        (checkpoints.GroupCommit: one statement and one commit for the batch)."""
        row = {"id": run_id, "token": token, "name": step.name, "seq": step.seq, "took": took,
               "outcome": step.outcome, "result": step.result, "error": step.error}  # fmt: skip
        if session is not None:
            return bool(session.q("save_step", **row))
        return self._checkpoints.save(row)

    @functools.cached_property
    def _checkpoints(self) -> GroupCommit:
        return GroupCommit(self._save_batch, self._save_one)

    def _save_batch(self, rows: Sequence[dict[str, Any]]) -> set[tuple[int, str]]:
        with self._one_write() as s:  # one statement: PostgreSQL's autocommit commits it
            return {(int(r[0]), str(r[1])) for r in s.q("save_steps", rows=rows_json(rows))}

    def _save_one(self, row: dict[str, Any]) -> bool:
        with self._one_write() as s:
            return bool(s.q("save_step", **row))

    def _one_write(self) -> AbstractContextManager[Session]:
        """A session for one statement that writes: PostgreSQL's autocommit (one round trip,
        no BEGIN/COMMIT), SQLite's write transaction (its lock taken at BEGIN IMMEDIATE)."""
        return self._read() if self.dialect == "postgresql" else self._tx()

    def unpark(self, run_id: int, token: int) -> None:
        with self._one_write() as s:
            s.q("unpark", id=run_id, token=token)

    def signal_of(self, run_id: int, name: str) -> tuple[str, datetime | None] | None:
        with self._read() as s:
            rows = s.q("signal_of", id=run_id, name=name)
        return (str(rows[0][0]), self._durable_time(quarantine.SIGNAL, f"{run_id}/{name}", rows[0][1], "sent_at")) \
            if rows else None  # fmt: skip

    def signals_of(self, run_id: int) -> list[tuple[str, str, datetime | None]]:
        with self._read() as s:
            rows = s.q("signals_of", id=run_id)
        return [(str(r[0]), str(r[1]), self._durable_time(quarantine.SIGNAL, f"{run_id}/{r[0]}", r[2], "sent_at"))
                for r in rows]  # fmt: skip

    def signal(self, run_id: int, name: str, payload: str) -> SignalAnswer:
        with self._tx() as s:
            return drive_signal(s, signal_steps(run_id, name, payload))

    def wait_of(self, run_id: int) -> WaitRecord | None:
        with self._read() as s:
            rows = s.q("wait_of", id=run_id)
        return self._wait_from_row(run_id, rows[0]) if rows else None

    def waits_of(self, run_ids: Sequence[int]) -> dict[int, WaitRecord]:
        """wait_of for a page of runs (listings), in one statement: the parked ones' waits."""
        if not run_ids or not self.durable_supported:
            return {}
        with self._read() as s:
            rows = s.q("waits_of", ids=json.dumps(list(run_ids)))
        return {int(r[0]): self._wait_from_row(int(r[0]), r[1:]) for r in rows}

    def rate_wait_of(self, run_id: int) -> tuple[str, str | None, datetime | None] | None:
        """A pending run waiting for its rate's window (the flow claim moved it there): the
        rate's name, its key and when the window opens; None otherwise."""
        with self._read() as s:
            rows = s.q("rate_wait_of", id=run_id)
        return (str(rows[0][0]), rows[0][1], self._durable_time(quarantine.RUN, run_id, rows[0][2], "due_at")) \
            if rows else None  # fmt: skip

    def save_progress(self, rows: Sequence[tuple[int, int, float, str | None]]) -> set[int]:
        """ctx.progress of running runs (id, token, fraction, message): written with the
        heartbeat, only where the token still holds the run."""
        if not rows:
            return set()
        saved: set[int] = set()
        with self._tx() as s:
            for run_id, token, fraction, message in sorted(rows):  # in id order, as heartbeats and finishes lock
                got = s.q("progress_save", id=run_id, token=token, fraction=fraction, message=message)
                saved.update(int(r[0]) for r in got)
        return saved

    def progress_of(self, run_id: int) -> tuple[float | None, str | None, datetime | None] | None:
        """The run's last progress; a fraction that is not a number from 0 to 1 (NaN, infinity,
        out of range: a damaged row) reads as None, named once, as a time that cannot be read."""
        with self._read() as s:
            rows = s.q("progress_of", id=run_id)
        if not rows:
            return None
        value = float(rows[0][0])
        fraction = value if math.isfinite(value) and 0 <= value <= 1 else None
        if fraction is None:
            quarantine.report(quarantine.PROGRESS, run_id, f"stored fraction {value!r} is not a number from 0 to 1")
        return fraction, rows[0][1], self._durable_time(quarantine.PROGRESS, run_id, rows[0][2], "updated_at")

    def park_runs(self, outcomes: Sequence[Outcome]) -> set[int]:
        """Write PARKED outcomes (in one transaction): each run pending, due when its wait ends;
        one parked for a signal already sent is due at once (park_signalled)."""
        if not outcomes:
            return set()
        with self._tx() as s:
            return self._park(s, outcomes)

    def _finish_durable(self, s: Session, outcomes: Sequence[Outcome]) -> None:
        """In a finish's transaction, before the outcomes (each one's token holds its run): the
        handlers' last checkpoints (Outcome.steps: a step returned at once), then the parks."""
        for query, params in finish_steps(outcomes):
            s.q(query, **params)
        self._park(s, [o for o in outcomes if o.status == PARKED])

    def _park(self, s: Session, outcomes: Sequence[Outcome]) -> set[int]:
        parked: set[int] = set()
        for o in outcomes:
            kind, name, since, until = _park_of(o.result)
            rows = s.q("park", id=o.id, token=o.token, wake_in=o.retry_in)
            if not rows:
                continue
            parked.add(o.id)
            if rows[0][0] == "pending":  # the wait's start and end as the handler read them (one clock reading)
                until = rows[0][1] if until is None else self._ts(datetime.fromisoformat(until))
                since = None if since is None else self._ts(datetime.fromisoformat(since))
                s.q("park_wait", id=o.id, token=o.token, kind=kind, name=name, until=until, since=since)
                s.q("park_signalled", id=o.id)
        return parked

    def forget_durable(self, s: Session, ids: Sequence[int]) -> None:
        """The steps, waits, signals and progress of runs retention deleted."""
        if not ids or not self.durable_supported:
            return
        text = json.dumps(list(ids))
        for query in ("durable_forget", "durable_forget_waits", "durable_forget_signals", "durable_forget_progress"):
            s.q(query, ids=text)


def _park_of(result: str | None) -> tuple[str, str | None, str | None, str | None]:
    """A PARKED outcome's result: [kind, name, since, until] (since and until: ISO times;
    an older worker's [kind, name] has neither: the park's own clock reading is used)."""
    kind, name, since, until = [*json.loads(result or '["sleep", null]'), None, None][:4]
    return str(kind), name, since, until
