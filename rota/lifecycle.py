"""The run lifecycle in one place: every state a run can be in, every transition between them,
who may make it and what it checks. Every SQL statement that changes a run names its
transition (a `-- transition: NAME` line under its `-- name:`), and tests/test_lifecycle.py
checks, for every store, that the statements and this table agree.

Design note
-----------
A run's state is not one column: it is read from a few (`state_of`).

- `status` is one of the six statuses of the contract (pending, running, succeeded, failed,
  skipped, cancelled); users filter on it and it never takes another value.
- pending: `due_at` in the future is *due later* (a delay, a retry's backoff, a tick made
  ahead of its time: `tick` set, `attempt` 0), else *due*.
- *queued* is a tick of an exclusive schedule waiting behind its active run (overlap="queue",
  or the successor of a replaced run). The database column for it is `held` (its name since
  schema 1; it is read by the partial indexes and the trigger that promotes the oldest queued
  tick). It is NOT the held of this table: in Python it is `Run.queued`, `NewRun.held`.
  Renaming the column would touch the claim, the exclusive index and the trigger on both
  backends for no behaviour; the mapping is written here instead.
- *held* is a run claimed by a worker whose handler has not started: status running, a
  token, a lease, `started_at` NULL and the attempt not counted. `Run.held` says so, and
  the CLI, the web API and `--json` show it.
- *running* has `started_at` set: its handler started, its attempt counted.
- *cancel requested* is the `cancel_requested` flag on a held or running run: only its
  owner ends it (cooperatively), and no statement runs it again: a claim never takes it, a
  start refuses it, a hand-back and a rescue end it cancelled, a retry ends it cancelled.
- *handed back* is a pending run that a stopping worker gave back (due at once; a held run
  claimed ahead of its due time keeps that time, and is then simply due later). A held one
  is handed back as it was; a started one gives its attempt back, recorded in its history
  with status "handed back". It is claimed like any due run.

Attempts count only starts. A claim starts the runs that fit in the worker's free slots
(attempt + 1, started_at) and holds the rest. A held run starts on the worker, without a
round trip, when a slot frees (the point of holding it). Its start is written later: a run
that ends within `START_AGE` (50 ms, rota/worker/completer.py) carries it in its outcome
(`Outcome.started`: the finish records start and end in one statement, so a short held run
costs no statement and no row version of its own); one still running then has it written
by `Store.start`, just before the outcomes of that flush. The database refuses the start of a run
whose cancellation was requested (or whose token no longer holds it); the worker checks that
run at once and stops the handler as it stops a running run asked to cancel, and its outcome
records the start: what ran is in the history.

So "a cancelled run never starts" is decided by the database everywhere it can be: a claim
never takes such a run, `Store.start` refuses it, a hand-back, a rescue or a retry ends it
cancelled, and a worker never starts a held run it knows is asked to cancel (PostgreSQL's
NOTIFY tells it within milliseconds; it does not start the run until the database confirms).
The one exception is the race this design accepts for the hot path: a request that comes
while the run is held (milliseconds: the hold horizon) and that the worker has not heard of
when a slot frees (on SQLite, where another process's request is heard through the refused
start, the next heartbeat or the confirmation) lets the handler start; it is then stopped at
once and recorded as it ran (the model test allows exactly this case).

Killed between a held run's local start and the start's write (at most about 50 ms), a worker
leaves a run the database still shows held: the rescue returns it to pending without an
attempt, and its handler runs again on another worker, as any run whose worker died before
its outcome was written does. The rescue records the held run's loss in its history (status
"lost", "held": true, no started_at), so a handler that may have run is never invisible. So
the invariant is kept in the database's direction (`attempt` never counts a handler that did
not start); the window in which a started handler is not yet counted is that write's delay. With `max_attempts=1` such a run may therefore run
twice, as at-least-once delivery after a crash always allows; it is never failed for a crash
before its start.

A claim whose reply never reached its worker (the connection cut after the commit) leaves runs
that worker owns but does not know. Before its next claim (on reconnecting, after its own
leases are renewed and its outcomes written) the worker gives back every run it owns under a
token it does not hold and whose lease still runs (`disown`): as it was before the claim, the
attempt the claim counted given back (no handler ran). Claims are made by the worker's poll
loop alone, one at a time, so none is in flight meanwhile. This relies on worker ids being
unique among live workers (host:pid), as the registry does.

A *parked* run (rota/durable.py: `ctx.sleep`, `ctx.wait_for`) is pending, due when its wait
ends, with its wait in rota_waits (kind, signal name, until) under the token of the execution
that parked (`Run.waiting`, read by App.get_run; a run claimed since has another token, so an
old row is over). The park gives its attempt back (a park is not an attempt's end) and clears
its start; a worker claims it like any due run when it is due, or at once after `signal`. A
schedule's pause, update or removal does not withdraw it (it is in progress, as a running
run is); `cancel` cancels it at once, and so does a replacing tick (overlap='replace': it is
its schedule's active run). Once its wait is over it is *due*; a flow claim that finds its
rate full moves it to the window (`rate_wait`, rate_waited set): *due later*, no longer
parked, and `Run.waiting` says it waits for the rate (kind "rate", read by `rate_wait_of`).

Ticks made ahead (`make_ahead`) are pending runs due later; they meet the misfire and overlap
policies exactly as ticks made at their time (rota/worker/ticks.py, rota/stores/sqlstore/schedules.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from .models import CANCELLED, FAILED, PENDING, RUNNING, SKIPPED, SUCCEEDED, Run

# -- states ----------------------------------------------------------------------------
DUE_LATER: Final = "due later"  # pending, due_at in the future (delay, backoff)
AHEAD: Final = "made ahead"  # pending, a schedule's tick inserted before its time
DUE: Final = "due"  # pending, due now: the next claim may take it
QUEUED: Final = "queued"  # pending behind its exclusive schedule's active run (column `held`)
WAITING: Final = "waiting on parents"  # pending, after=: parents yet to succeed (column `held`, waiting_on > 0)
HANDED_BACK: Final = "handed back"  # pending again at once (or at its due time), given back by a stopping worker
PARKED: Final = "parked"  # pending, waiting on ctx.sleep / ctx.wait_for (rota_waits), due when the wait ends
HELD: Final = "held"  # running, claimed by a worker, its handler not started
STARTED: Final = "running"  # running, its handler started
CANCEL_REQUESTED: Final = "cancel requested"  # held or running, asked to stop: it never runs again
FINAL: Final = (SUCCEEDED, FAILED, SKIPPED, CANCELLED)

STATES: Final = (DUE_LATER, AHEAD, DUE, QUEUED, WAITING, HANDED_BACK, PARKED, HELD, STARTED, CANCEL_REQUESTED, *FINAL)
PENDING_STATES: Final = (DUE_LATER, AHEAD, DUE, QUEUED, WAITING, HANDED_BACK, PARKED)
ACTIVE_STATES: Final = (HELD, STARTED, CANCEL_REQUESTED)

# who may make a transition
CLIENT: Final = "client"  # any App: enqueue, cancel, trigger, retry, schedule changes
WORKER: Final = "owner"  # the worker whose token holds the run
ANY_WORKER: Final = "any worker"  # the poll of any worker (claims, ticks, rescue)
DATABASE: Final = "database"  # a trigger in the database (the exclusive slot's hand-over)


@dataclass(frozen=True, slots=True)
class Transition:
    name: str
    from_states: tuple[str, ...]
    to_states: tuple[str, ...]
    actor: str
    checks: str
    description: str


def _t(name: str, src: tuple[str, ...], dst: tuple[str, ...], actor: str, checks: str, what: str) -> Transition:
    return Transition(name, src, dst, actor, checks, what)


TRANSITIONS: Final = (
    _t("enqueue", (), (DUE, DUE_LATER, WAITING, CANCELLED), CLIENT,
       "arguments are JSON; a keyed run with an active twin (or, with unique_for, one created within the "
       "window and not cancelled) is not inserted (it is returned); after=: the parents exist, are locked in id "
       "order, and one already failed, cancelled or skipped makes the run cancelled",
       "a task's run is inserted, due now or later, or waiting for its parents"),
    _t("release_dependents", (WAITING,), (DUE,), DATABASE,
       "a parent's status became succeeded (trigger rota_run_settled, in that transaction): waiting_on - 1, "
       "at 0 the run is due",
       "a dependent becomes due with its last parent's success"),
    _t("cancel_dependents", (WAITING,), (CANCELLED,), DATABASE,
       "a parent ended failed, cancelled or skipped (trigger rota_run_settled): the error names that parent; "
       "it cascades to the dependent's own dependents",
       "a flow whose parent failed is cancelled"),
    _t("orphaned", (WAITING,), (FAILED,), ANY_WORKER,
       "a run waiting on parents none of which is pending or running any more (a parent deleted by hand, or "
       "its count of parents damaged): failed as damaged (DamagedRow, never retried); its own dependents are "
       "cancelled",
       "a waiting run whose parents are gone is set aside, not left waiting forever"),
    _t("keyless", (DUE, DUE_LATER), (FAILED,), ANY_WORKER,
       "a waiting run with the name of a stored limit or rate and no key (damaged: no claim can take it): "
       "failed as damaged (DamagedRow, never retried)",
       "a run no claim can take is set aside, not left waiting forever"),
    _t("backfill", (), (DUE, QUEUED), CLIENT,
       "one row per (schedule, tick) for ticks in [start, end) before the schedule's next planned tick and not "
       "in the future; a skipped tick's run gives its tick up; exclusive: queued, oldest first",
       "App.backfill makes runs for past ticks that have none"),
    _t("misfire_skip", (AHEAD,), (SKIPPED,), ANY_WORKER,
       "a run made ahead not claimed by its tick + misfire_grace, misfire='skip' (or coalesce with a later tick "
       "due)",
       "a run made ahead meets the misfire policy as a tick made at its time"),
    _t("rate_wait", (DUE,), (DUE_LATER,), ANY_WORKER,
       "the run's rate key is full (N starts within the window, on the database clock), its key locked by "
       "the flow claim",
       "a run over its rate waits, pending with no attempt, until the window opens (due_at moved there)"),
    _t("rate_reopen", (DUE_LATER,), (DUE,), ANY_WORKER,
       "a worker storing a rate whose max or per changed (a deploy): only runs flagged rate_waited (by "
       "rate_wait, which moves only due runs; the claim clears the flag)",
       "runs waiting for a changed rate's old window are due again; the next claim judges them by the new one"),
    _t("keyed", (DUE, DUE_LATER), (DUE, DUE_LATER), ANY_WORKER,
       "a run made where its limit or rate key could not be computed (a callable by=) waits under no limit's "
       "name; a worker declaring its task computes the keys before its flow claim",
       "a run made outside its task's process gets its limit and rate keys"),
    _t("skip_unkeyed", (DUE, DUE_LATER, AHEAD), (SKIPPED,), ANY_WORKER,
       "a schedule's tick (not a backfill) waiting unresolved, whose keys the declaring worker's code cannot "
       "compute either (its by= raises on the stored arguments): the error recorded, finished_at set, counted "
       "once in the schedule's skip_count (rota_run_finished), as a tick pass there records it",
       "a tick made where its task is not declared that its task's code cannot key is recorded skipped"),
    _t("misfire_run", (AHEAD,), (DUE,), ANY_WORKER,
       "a run made ahead past its deadline that the policy (coalesce, all, a raised grace) still runs: the "
       "deadline is cleared",
       "a late run made ahead is allowed to start"),
    _t("make_ahead", (), (AHEAD,), ANY_WORKER,
       "the schedule's next_run_at compare-and-set; one row per (schedule, tick); an exclusive schedule "
       "with an active run gets no tick ahead",
       "a tick due within the lead is inserted before its time; it meets misfire and overlap at its time"),
    _t("tick", (), (DUE, QUEUED, SKIPPED), ANY_WORKER,
       "the next_run_at compare-and-set; one row per (schedule, tick); misfire policy on missed ticks; overlap "
       "policy against the active run (the exclusive index is the backstop)",
       "a due tick becomes a run: due, queued behind the active run (queue), or recorded skipped"),
    _t("withdraw", (AHEAD, DUE_LATER, DUE, QUEUED, HANDED_BACK), (CANCELLED,), CLIENT,
       "pending runs only, never a parked one (its wait in rota_waits under the run's token); made-ahead "
       "ticks only if not due yet and the definition changed (their tick is cleared and planned again); "
       "a removed schedule: every other pending run, a handed-back one too",
       "a schedule paused, updated, redeployed or removed takes back its pending runs"),
    _t("promote", (QUEUED,), (DUE,), DATABASE,
       "the schedule has no active run (the exclusive index)",
       "the active run of an exclusive schedule ended: its oldest queued tick becomes due"),
    _t("overlap", (DUE_LATER, DUE, HANDED_BACK, PARKED, QUEUED), (CANCELLED,), ANY_WORKER,
       "overlap='replace': the pending active run (due, due later for its backoff, handed back, or parked: a "
       "parked run is its schedule's active run) and queued ticks are cancelled; a running one is asked to "
       "cancel (see cancel)",
       "a replacing tick or trigger takes the exclusive slot"),
    _t("claim", (DUE, HANDED_BACK), (STARTED, HELD), ANY_WORKER,
       "status pending, due, not queued, cancellation not requested; FOR UPDATE SKIP LOCKED / the write lock; "
       "a new token and a lease per run",
       "priority, due time, id order; the first `start` (the free slots) start at once, the rest are held"),
    _t("claim_ahead", (DUE_LATER, AHEAD, DUE, HANDED_BACK, PARKED), (HELD,), ANY_WORKER,
       "an idle worker, just before the run's due time: due within the lead (20 ms, the database's clock), "
       "plain (no limit or rate), not queued, cancellation not requested; FOR UPDATE SKIP LOCKED / the write "
       "lock; a new token and a lease; held, never started by the claim",
       "a run about to be due is claimed held; the worker starts it at its due time on its own clock"),
    _t("start", (HELD,), (STARTED,), WORKER,
       "the token; still held (started_at NULL); cancellation not requested",
       "a held run's handler started: the attempt counted, started_at set"),
    _t("heartbeat", ACTIVE_STATES, ACTIVE_STATES, WORKER,
       "the token and status running, whatever the lease (ours while nobody took it)",
       "the lease renewed; answers whether cancellation was requested"),
    _t("fence", (STARTED, CANCEL_REQUESTED), (STARTED, CANCEL_REQUESTED), WORKER,
       "the token and status running; a stopping worker's last write for a run whose handler still runs: the "
       "lease ends 2 s from now (the database's clock), the run marked WorkerStopped with its token; the "
       "worker's process ends before that lease does",
       "a run whose handler outlived the shutdown is taken by the rescue only once its process is gone"),
    _t("finish", (STARTED, HELD, CANCEL_REQUESTED), FINAL, WORKER,
       "the token and status running; a held run's outcome carries its start if that was not written",
       "an attempt's outcome: succeeded, failed, cancelled (a held run cancelled before it started: no attempt)"),
    _t("retry", (STARTED, CANCEL_REQUESTED, *FINAL), (DUE_LATER, DUE, CANCELLED), WORKER,
       "the token; attempts remain; a run whose cancellation was requested ends cancelled instead. From a "
       "final run (App.retry, a client): a new run with retry_of",
       "a failed attempt waits for its backoff; or an operator runs a final run again"),
    _t("hand_back", (HELD, STARTED, CANCEL_REQUESTED), (HANDED_BACK, DUE_LATER, CANCELLED), WORKER,
       "the token and status running; a held run as it was (one claimed ahead keeps its due time), a started "
       "one gives its attempt back; cancellation requested: cancelled",
       "a stopping worker gives back what it holds and the runs whose handlers ended (or were stopped) by the "
       "end of shutdown_timeout"),
    _t("refuse", (HELD, STARTED, CANCEL_REQUESTED), (DUE_LATER, FAILED, CANCELLED), WORKER,
       "the token and status running; the worker does not register the run's task; its attempt given back, its "
       "start cleared (a rated run's start leaves its rate's window, in that transaction), due after half the "
       "time since its first refusal (refused_at; 1 to 60 s), never before its "
       "own due time; refused for longer than UNKNOWN_TASK_GRACE since then: failed; cancellation requested: "
       "cancelled",
       "a worker of an older release gives a new task's run back for a worker that registers it"),
    _t("disown", (HELD, STARTED, CANCEL_REQUESTED), (DUE, DUE_LATER, AHEAD, HANDED_BACK, CANCELLED), WORKER,
       "the owner (its worker id) and status running, a token the worker does not hold, the lease not run out; "
       "after a claim whose outcome the worker could not learn (an error), at its next reach of the database: "
       "as before that claim (no handler ran: a started one's attempt given back, its start cleared, a rated "
       "run's start leaves its rate's window; due time and history kept); cancellation requested: cancelled",
       "a worker gives back the runs of a claim whose reply it never got (the connection cut after the commit)"),
    _t("park", (HELD, STARTED, CANCEL_REQUESTED), (PARKED, DUE, CANCELLED), WORKER,
       "the token and status running; the handler called ctx.sleep or ctx.wait_for (rota.durable) and its wait is "
       "not over: pending, due when it ends (the database's clock), its attempt given back and its start "
       "cleared (a park is not an attempt's end), its wait recorded in rota_waits; waiting for a signal already "
       "sent: due at once (park_signalled, in that transaction); cancellation requested: cancelled",
       "a run sleeps or waits for a signal without holding a worker slot or a limit slot"),
    _t("signal", (PARKED,), (DUE,), CLIENT,
       "App.signal: the run's row locked first; the signal kept in rota_signals if the run is pending or "
       "running; a run parked waiting for that signal's name is due now (NOTIFY on PostgreSQL)",
       "a signal resumes the run waiting for it, on any worker"),
    _t("rescue", (HELD, STARTED, CANCEL_REQUESTED), (DUE, DUE_LATER, FAILED, CANCELLED), ANY_WORKER,
       "lease expired on the database clock; the rescue rule (not during this worker's outage); held: pending "
       "without an attempt (due at its due time if that is still to come: claimed ahead), a 'lost' history "
       "entry marked held (its handler may have started just before); started: retry if "
       "attempts remain, else failed; cancel requested: cancelled",
       "runs of a lost worker are taken back"),
    _t("lease_damaged", (HELD, STARTED, CANCEL_REQUESTED), (FAILED,), ANY_WORKER,
       "status running with a lease no worker can have granted: none (NULL), infinite, or more than 366 days "
       "past now on the database clock (a lease is at most a year); swept with the rescue, the same index "
       "probe first: failed as damaged (DamagedRow, never retried), named once in the log",
       "a running run no rescue would ever take is set aside, its schedule, limit and key freed"),
    _t("cancel", (DUE_LATER, AHEAD, DUE, QUEUED, WAITING, HANDED_BACK, PARKED, HELD, STARTED),
       (CANCELLED, CANCEL_REQUESTED),
       CLIENT,
       "pending: cancelled at once; held or running: cancellation requested (NOTIFY on PostgreSQL), the owner "
       "ends it",
       "an operator or overlap='replace' stops a run"),
    _t("prune", FINAL, (), ANY_WORKER,
       "final runs only, finished before the retention period",
       "retention deletes old history"),
    _t("trigger", (), (DUE, QUEUED, SKIPPED), CLIENT,
       "the schedule's overlap policy against its active run, as a tick's (a run made ahead is not active)",
       "a manual run of a schedule, now"),
)  # fmt: skip

BY_NAME: Final = {t.name: t for t in TRANSITIONS}


def state_of(run: Run, now: datetime) -> str:
    """The lifecycle state of a run snapshot (now: the database's time)."""
    if run.status == RUNNING:
        if run.cancel_requested:
            return CANCEL_REQUESTED
        return HELD if run.started_at is None else STARTED
    if run.status != PENDING:
        return run.status
    if run.queued:
        return WAITING if run.waiting_on else QUEUED
    parked = run.waiting is not None and run.waiting.get("kind") != "rate"  # (Run.waiting: App.get_run's)
    if parked and run.due_at > now:
        return PARKED
    if run.due_at > now:
        made_ahead = run.schedule is not None and run.attempt == 0 and not run.history and run.error is None
        return AHEAD if made_ahead else DUE_LATER  # (a refused tick has its error: due later)
    if run.history and run.history[-1].get("status") == "handed back":
        return HANDED_BACK
    return DUE


def table_markdown() -> str:
    """The transitions as a Markdown table (docs/concepts/lifecycle.md has its own wording of
    it, held against TRANSITIONS by tests/test_lifecycle.py)."""
    lines = ["| transition | from | to | who | checks |", "|---|---|---|---|---|"]
    for t in TRANSITIONS:
        src = ", ".join(t.from_states) or "(new run)"
        lines.append(f"| {t.name} | {src} | {', '.join(t.to_states)} | {t.actor} | {t.checks} |")
    return "\n".join(lines)


__all__ = ["BY_NAME", "STATES", "TRANSITIONS", "Transition", "state_of", "table_markdown"]
