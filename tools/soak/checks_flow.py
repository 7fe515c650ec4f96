"""The soak's invariants on attempts, retries, dependencies, uniqueness, transactional
effects, failures and damaged rows (the time-based ones are in checks.py)."""

from __future__ import annotations

import itertools
from collections import defaultdict

from tests.faults.invariants import GIVEN_UP

from .checks import Check, Facts, Violation, _history, beside_itself, limits, overlap, policies, rates, settled, ticks
from .checks_damage import damage

HANDLER_ERRORS = {"SoakFailure"}  # what the handlers raise on purpose


def attempts(f: Facts) -> list[Violation]:
    """Executions (distinct tokens in the evidence) against the attempts the database counts:
    never more executions than attempts (handed back and held attempts that were lost
    included: their handler may have started), never an attempt decided by a handler that
    no evidence shows started."""
    more, fewer = [], []
    for run_id, run in f.runs.items():
        if run_id in f.ledger.damaged_runs or run.status == "cancelled":
            continue
        execs = len(f.evidence.by_run.get(run_id, []))
        uncounted = sum(
            1
            for a in run.history
            if a.get("status") in GIVEN_UP and (a.get("held") or a.get("status") == "handed back")
        )
        if execs > run.attempt + uncounted:
            more.append((run_id, execs))
        decided = sum(1 for a in run.history if a.get("status") not in GIVEN_UP)
        error = (run.error or {}).get("type")
        decided += run.status == "succeeded" or (run.status == "failed" and error in HANDLER_ERRORS)
        if execs < decided:
            fewer.append((run_id, execs))
    found = []
    if more:
        found.append(Violation("attempts", f"{len(more)} run(s) executed more often than attempts recorded, e.g. run "
                               f"{more[0][0]}: {more[0][1]} executions, history {_history(f, more[0][0])}",
                               [i for i, _ in more]))  # fmt: skip
    if fewer:
        found.append(Violation("attempts", f"{len(fewer)} run(s) with an attempt decided by a handler that never "
                               f"started, e.g. run {fewer[0][0]}: {fewer[0][1]} executions, history "
                               f"{_history(f, fewer[0][0])}", [i for i, _ in fewer]))  # fmt: skip
    return found


def leases(f: Facts) -> list[Violation]:
    """A lease is lost only by a worker that was killed with -9, or (as `WorkerStopped`) by one
    sent SIGTERM whose handler outlived its shutdown timeout (docs/concepts/faults.md): a
    worker that stops on SIGTERM hands back what no handler still runs, and every proxy cut is
    shorter than half a lease (an owner back within a lease keeps its runs)."""
    lost: dict[str, list[str]] = defaultdict(list)
    for run in f.runs.values():
        owners = [(str(a.get("worker")), (a.get("error") or {}).get("type")) for a in run.history
                  if a.get("status") == "lost"]  # fmt: skip
        error = run.error or {}
        if run.status == "failed" and error.get("type") in ("WorkerLost", "WorkerStopped"):
            owners.append((str(error.get("message", "")).removeprefix("worker ").split(" ")[0], error.get("type")))
        for owner, why in owners:
            pid = owner.rpartition(":")[2]
            if not pid.isdigit() or not (int(pid) in f.killed or (int(pid) in f.termed and why == "WorkerStopped")):
                lost[owner].append(run.id)
    return [Violation("lease-lost", f"worker {owner} was not killed, yet {len(ids)} of its attempts were lost "
                      "(rescued by another worker)", sorted(ids, key=int)) for owner, ids in sorted(lost.items())]  # fmt: skip


def cancels(f: Facts) -> list[Violation]:
    """A run that cancel() returned as cancelled never starts afterwards and ends cancelled."""
    bad = []
    for run_id, when in f.ledger.cancels:
        late = [x for x in f.evidence.by_run.get(run_id, []) if x.start > when]
        run = f.runs.get(run_id)
        if late or (run is not None and run.status != "cancelled"):
            bad.append(f"run {run_id}: {len(late)} execution(s) after its cancel, now {run.status if run else '?'}")
    return [Violation("cancel", f"{len(bad)} run(s) cancelled by cancel() ran or ended otherwise, e.g. {bad[0]}",
                      [b.split()[1].rstrip(":") for b in bad])] if bad else []  # fmt: skip


def tokens(f: Facts) -> list[Violation]:
    """Fencing tokens only grow: a run's executions, in the order they started, carry growing tokens."""
    bad = [run_id for run_id, execs in f.evidence.by_run.items()
           if any(b.token <= a.token for a, b in itertools.pairwise(execs))]  # fmt: skip
    return [Violation("tokens", f"{len(bad)} run(s) whose later execution carried a smaller token", bad)] if bad else []


def discards(f: Facts) -> list[Violation]:
    """An outcome a worker logged as discarded (its token no longer held the run) is not the
    run's recorded end under that token: a write whose commit reply was lost is not stale."""
    bad = sorted({run_id for run_id, status, token in f.discarded
                  if (run := f.runs.get(run_id)) is not None and (run.status, run.token) == (status, token)}, key=int)  # fmt: skip
    return [Violation("discarded", f"{len(bad)} outcome(s) logged as discarded though the run holds them, e.g. "
                      f"run {bad[0]}", bad)] if bad else []  # fmt: skip


def retried_once(f: Facts) -> list[Violation]:
    retries: dict[str, list[str]] = defaultdict(list)
    for run in f.runs.values():
        if run.retry_of is not None:
            retries[str(run.retry_of)].append(run.id)
    twice = {orig: ids for orig, ids in retries.items() if len(ids) > 1}
    if not twice:
        return []
    orig, ids = min(twice.items(), key=lambda kv: int(kv[0]))
    return [Violation("retried-twice", f"{len(twice)} failed run(s) retried more than once, e.g. run {orig} by runs "
                      f"{', '.join(ids)}", sorted(twice, key=int))]  # fmt: skip


def after(f: Facts) -> list[Violation]:
    early, wrong = [], []
    for child, parents in f.ledger.parents.items():
        run = f.runs.get(child)
        execs = f.evidence.by_run.get(child, [])
        if run is None:
            continue
        states = {p: f.runs[p].status if p in f.runs else "missing" for p in parents}
        if execs:
            first = execs[0].start
            for p in parents:
                ok = [x for x in f.evidence.by_run.get(p, []) if x.ok]
                if states[p] != "succeeded" or not ok or ok[-1].end > first:
                    early.append(child)
                    break
        elif all(s == "succeeded" for s in states.values()) and run.status == "cancelled":
            wrong.append(child)
        if any(s in ("failed", "cancelled", "skipped") for s in states.values()) and run.status != "cancelled":
            wrong.append(child)
    found = []
    if early:
        found.append(Violation("after", f"{len(early)} after= run(s) started before all their parents had "
                               f"succeeded, e.g. run {early[0]} after {f.ledger.parents[early[0]]}", early))  # fmt: skip
    if wrong:
        found.append(Violation("after", f"{len(wrong)} after= run(s) whose end does not follow from their parents "
                               f"(a parent failed and it was not cancelled, or all succeeded and it was), e.g. run "
                               f"{wrong[0]}", sorted(set(wrong), key=int)))  # fmt: skip
    return found


def unique(f: Facts) -> list[Violation]:
    by_key: dict[str, list[str]] = defaultdict(list)
    for run in f.runs.values():
        if run.task == "soak.unique" and run.status != "cancelled":
            by_key[str(run.key)].append(run.id)
    dup = {k: ids for k, ids in by_key.items() if len(ids) > 1}
    if not dup:
        return []
    return [Violation("unique_for", f"{len(dup)} key(s) with more than one run inside unique_for: "
                      + "; ".join(f"{k}: {ids}" for k, ids in sorted(dup.items())), sorted(i for v in dup.values() for i in v))]  # fmt: skip


def transactional(f: Facts) -> list[Violation]:
    bad = []
    for run in f.runs.values():
        if run.task != "soak.txn":
            continue
        rows = f.effects.get(run.id, [])
        want = [run.token] if run.status == "succeeded" else []
        if rows != want:
            bad.append(f"run {run.id} {run.status} token {run.token}: rows {rows}")
    if not bad:
        return []
    return [Violation("transactional", f"{len(bad)} transactional run(s) whose own rows are not exactly the "
                      f"succeeded attempt's, e.g. {bad[0]}", [b.split()[1] for b in bad])]  # fmt: skip


def attempt_errors(f: Facts) -> list[Violation]:
    """An earlier attempt failed only because its handler raised (retries hide the rest)."""
    by_type: dict[str, list[str]] = defaultdict(list)
    for run in f.runs.values():
        if run.id in f.ledger.damaged_runs:
            continue
        for a in run.history:
            error = a.get("error") or {}
            if a.get("status") == "failed" and error.get("type") not in HANDLER_ERRORS:
                by_type[f"{error.get('type')}: {str(error.get('message', ''))[:120]}"].append(run.id)
    return [Violation("attempt-error", f"{len(ids)} attempt(s) failed with {what}, then retried", sorted(set(ids), key=int))
            for what, ids in sorted(by_type.items())]  # fmt: skip


def copies_of_damaged(f: Facts) -> set[str]:
    """Runs made by retrying a damaged run (or such a copy): they carry its damaged fields."""
    copies: set[str] = set()
    grew = True
    while grew:
        grew = False
        for run in f.runs.values():
            orig = str(run.retry_of) if run.retry_of is not None else None
            if orig is not None and run.id not in copies and (orig in f.ledger.damaged_runs or orig in copies):
                copies.add(run.id)
                grew = True
    return copies


def failures(f: Facts) -> list[Violation]:
    """A run fails only as the workload asked (its handler raised), as a damaged row, or as
    lost on its last attempt when workers are killed (or stopped past their shutdown timeout). A retry of a damaged run is named apart."""
    allowed = HANDLER_ERRORS | ({"WorkerLost"} if "kill" in f.faults else set())
    allowed |= {"WorkerStopped"} if "term" in f.faults else set()
    copies = copies_of_damaged(f)
    failed_copies = sorted((i for i in copies if f.runs[i].status == "failed"), key=int)
    found = [Violation("damaged-retried", f"{len(failed_copies)} retr(ies) of damaged runs (retry_many copied their "
                       "damaged fields into new runs, which failed the same way)", failed_copies)] if failed_copies else []  # fmt: skip
    by_type: dict[str, list[str]] = defaultdict(list)
    for run in f.runs.values():
        if run.status == "failed" and run.id not in f.ledger.damaged_runs and run.id not in copies:
            error = run.error or {}
            kind = str(error.get("type"))
            if kind not in allowed:
                by_type[f"{kind}: {str(error.get('message', ''))[:160]}"].append(run.id)
    return found + [Violation("unexpected-failure", f"{len(ids)} run(s) failed with {what}", sorted(ids, key=int))
                    for what, ids in sorted(by_type.items())]  # fmt: skip


def processes(f: Facts) -> list[Violation]:
    found = [Violation("worker-stopped", line, []) for line in f.ledger.unexpected_exits]
    found += [Violation("client-call", line, []) for line in f.ledger.client_errors]
    if f.ledger.damaged_at is not None:
        later = [r for r in f.runs.values() if r.created_at > f.ledger.damaged_at and r.schedule is None
                 and r.id not in f.ledger.damaged_runs]  # fmt: skip
        if later and not any(f.evidence.by_run.get(r.id) for r in later):
            found.append(Violation("claims-stopped", f"none of the {len(later)} runs enqueued after the damaged rows "
                                   "started", sorted((r.id for r in later), key=int)))  # fmt: skip
    return found


CHECKS: dict[str, Check] = {
    "beside-itself": beside_itself, "limit": limits, "rate": rates, "ticks": ticks, "policy": policies, "overlap": overlap,
    "final": settled, "attempts": attempts, "lease-lost": leases, "cancel": cancels, "tokens": tokens, "discarded": discards, "retried-twice": retried_once, "after": after, "unique_for": unique,
    "transactional": transactional, "unexpected-failure": failures, "attempt-error": attempt_errors, "quarantine": damage, "processes": processes,
}  # fmt: skip


def check(f: Facts) -> list[Violation]:
    found: list[Violation] = []
    for name, fn in CHECKS.items():
        try:
            found += fn(f)
        except Exception as exc:  # a checker bug is reported, not hidden
            found.append(Violation(name, f"the check itself failed: {type(exc).__name__}: {exc}", []))
    return found
