"""A task's limit and rate as stored (`rota_task_flow`, migration 0011), so that a run made
by a process that does not declare the task (`rota trigger`, `rota retry`, a schedule tick
or a backfill made by another app, `App.retry_many`) gets the same limit and rate keys as
one enqueued by the declaring code.

A worker stores the spec of each task it declares when it starts (the newest deploy wins,
as for the limits themselves). A spec records, for the limit and for the rate, the pool's
name and how to key a run: no key, the parameters `by=` names (with their positions and
JSON defaults, so stored arguments bind as the handler's signature binds them), or
"callable". A callable `by=` (or a parameter whose default is not JSON) cannot be computed
outside the declaring process: such a run is stored under the limit name UNRESOLVED, which
no claim takes (no limit has that name), and a worker that declares the task gives it its
keys before it claims (`resolve`). It waits; it never runs unlimited. A schedule's tick
whose keys the declaring code cannot compute either (its `by=` raises on the stored
arguments) is then recorded skipped with the error, as a tick pass in a declaring process
records it (`stamp_lenient`); any other such run takes the pools' empty key.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from . import quarantine
from .limits import Limit, Rate, _text, declared, stamp
from .models import PENDING, SKIPPED
from .serialization import simple_error

log = logging.getLogger("rota.flow")

# The limit name of a run whose keys only a worker declaring its task can compute.
UNRESOLVED = "\x1frota:unresolved"


def task_spec(task: Any) -> str | None:
    """The JSON spec of a declared task's limit and rate; None if it has neither."""
    lim, rate = task.opts.limit, task.opts.rate
    if lim is None and rate is None:
        return None
    spec: dict[str, Any] = {}
    for what, value, gate in (("limit", lim, task.limit_gate), ("rate", rate, task.rate_gate)):
        if value is not None:
            spec[what] = {"name": gate.name, "by": _by_spec(task.fn, value, task.opts.pass_context)}
    return json.dumps(spec, sort_keys=True)


def _by_spec(fn: Any, value: Limit | Rate, pass_context: bool) -> Any:
    by = value.by
    if by is None:
        return None
    if callable(by) and not isinstance(by, str):
        return "callable"
    params = list(inspect.signature(fn).parameters.values())[1 if pass_context else 0 :]
    positional: list[str] = []
    for p in params:
        if p.kind == p.VAR_POSITIONAL:
            break
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            positional.append(p.name)
    out = []
    for name in (by,) if isinstance(by, str) else tuple(by):
        p = next(q for q in params if q.name == name)
        entry: dict[str, Any] = {"name": name, "pos": positional.index(name) if name in positional else None}
        if p.default is not p.empty:
            if not _plain_json(p.default):
                return "callable"  # keyed from a value only the declaring process has
            entry["default"] = p.default
        out.append(entry)
    return out


def _plain_json(value: object) -> bool:
    try:
        return bool(json.loads(json.dumps(value)) == value)
    except (TypeError, ValueError):
        return False


def parse_spec(spec: object) -> dict[str, Any]:
    """A stored spec, checked whole (it may be damaged: a hand edit, a bad migration); a
    ValueError says, in one line, what is wrong with it."""
    try:
        parsed = json.loads(spec) if isinstance(spec, str) else spec
    except (ValueError, RecursionError):
        raise ValueError("the spec is not valid JSON") from None
    if not isinstance(parsed, dict) or not parsed or not set(parsed) <= {"limit", "rate"}:
        raise ValueError('the spec is not a JSON object with "limit" and/or "rate"')
    for what, part in parsed.items():
        if not isinstance(part, dict) or not isinstance(part.get("name"), str):
            raise ValueError(f'its {what} has no "name" (a string)')
        by = part.get("by", ...)
        if by is None or by == "callable":
            continue
        if not isinstance(by, list) or not by or not all(_by_entry(e) for e in by):
            raise ValueError(f'its {what}\'s "by" is not null, "callable" or a list of {{"name", "pos"}}')
    return parsed


def spec_reason(why: str) -> str:
    """The one wording of a damaged task spec's reason (rota.quarantine names it once)."""
    return f"its stored limit/rate spec cannot be used: {why}"


def _by_entry(entry: object) -> bool:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        return False
    pos = entry.get("pos", ...)
    return pos is None or (isinstance(pos, int) and not isinstance(pos, bool) and pos >= 0)


def stamp_spec(run: Any, spec: str) -> None:
    """Set a run's limit and rate from a stored spec and its stored (JSON) arguments; a key
    that cannot be computed here leaves the run UNRESOLVED (for a declaring worker). A
    damaged spec raises ValueError (see parse_spec; the caller sets a tick aside unresolved
    and refuses any other run in one line), so it never lets a run go unlimited."""
    parsed = parse_spec(spec)
    try:
        args, kwargs = json.loads(run.args or "[]"), json.loads(run.kwargs or "{}")
    except ValueError:
        args, kwargs = None, None
    keys: dict[str, tuple[str, str] | None] = {}
    try:
        keys = _spec_keys(parsed, args, kwargs)
    except quarantine.UNDECODABLE as exc:
        why = quarantine.describe(exc)
        quarantine.report(quarantine.TASK_SPEC, run.task, spec_reason(why))
        keys = {"limit": None}
    if any(v is None for v in keys.values()):
        run.limit_name, run.limit_key, run.rate_name, run.rate_key = UNRESOLVED, "", None, None
        return
    if (lim := keys.get("limit")) is not None:
        run.limit_name, run.limit_key = lim
    if (rate := keys.get("rate")) is not None:
        run.rate_name, run.rate_key = rate


def _spec_keys(parsed: Any, args: Any, kwargs: Any) -> dict[str, tuple[str, str] | None]:
    """Each pool's (name, key) from a stored spec; None for a key only the declaring code has."""
    keys: dict[str, tuple[str, str] | None] = {}
    for what in ("limit", "rate"):
        if what in parsed:
            key = _key(parsed[what]["by"], args, kwargs)
            name = parsed[what]["name"]
            if not isinstance(name, str):
                raise TypeError(f"the {what}'s name is {type(name).__name__}, not text")
            keys[what] = None if key is None else (name, key)
    if not keys:
        raise TypeError(f"no limit or rate in the {type(parsed).__name__}")
    return keys


def _key(by: Any, args: Any, kwargs: Any) -> str | None:
    if by is None:
        return ""
    if by == "callable" or not isinstance(args, list) or not isinstance(kwargs, dict):
        return None
    values = []
    for entry in by:
        name, pos = entry["name"], entry["pos"]
        if name in kwargs:
            values.append(kwargs[name])
        elif pos is not None and pos < len(args):
            values.append(args[pos])
        elif "default" in entry:
            values.append(entry["default"])
        else:
            return None  # the arguments do not bind: the declaring worker decides
    return _text(values[0]) if len(values) == 1 else json.dumps(values, sort_keys=True, default=str)


def resolved(task: Any, args_json: str, kwargs_json: str, *, tick: bool = False) -> Keys:
    """The limit and rate keys of an UNRESOLVED run, computed by a process that declares its
    task. A schedule's tick (`tick`) they cannot be computed for comes back skipped with the
    error, as the tick pass records one made where the task is declared (stamp_lenient)."""
    run = Keys()
    run.skip_unkeyed = tick
    _stamp_json(run, task, args_json, kwargs_json)
    return run


def warn_skipped(schedule: str, tick: datetime | None, error: str | None) -> None:
    """The warning for a tick recorded skipped because its keys cannot be computed (logged
    once that record is committed)."""
    why = json.loads(error or "{}").get("message")
    at = tick.isoformat() if tick is not None else None
    log.warning("schedule %r: the tick at %s is recorded skipped: %s", schedule, at, why)


def _stamp_json(run: Any, task: Any, args_json: str | None, kwargs_json: str | None) -> None:
    """Key a run from its stored (JSON) arguments by its declared task (see stamp_lenient)."""
    try:
        args, kwargs = json.loads(args_json or "[]"), json.loads(kwargs_json or "{}")
    except ValueError:
        args, kwargs = (), {}
    stamp_lenient(run, task, args, kwargs)


def stamp_lenient(run: Any, task: Any, args: Any, kwargs: Any) -> None:
    """Key a run made from stored arguments (a schedule's tick, a retry, an unresolved run).
    A call that cannot be keyed (a `by=` callable that raises, arguments that do not bind:
    enqueue refuses those, but a schedule stored by other code or an older deploy may hold
    them) never stops the ticks, the retry or the claim: a schedule's tick
    (`run.skip_unkeyed`) is recorded skipped with the error, to be seen in its history
    (the schedule goes on: a fixed deploy keys its next tick); any other run takes each
    pool's empty key, with a warning, and runs limited under that shared key."""
    try:
        stamp(run, task, args, kwargs)
    except Exception as exc:
        run.flow_known = True
        if getattr(run, "skip_unkeyed", False):
            run.status, run.limit_name, run.limit_key, run.rate_name, run.rate_key = SKIPPED, None, None, None, None
            run.error = simple_error("ConfigurationError", f"its limit and rate keys cannot be computed: {exc}")
            return
        limit, rate = task.limit_gate, task.rate_gate
        run.limit_name, run.limit_key = (limit.name, "") if limit is not None else (None, None)
        run.rate_name, run.rate_key = (rate.name, "") if rate is not None else (None, None)
        log.warning(
            "task %s: a run's limit and rate keys cannot be computed (%s); it takes the empty key", task.name, exc
        )


class Keys:
    """A run's keys as `resolved` computes them (status skipped: a tick they cannot key)."""

    limit_name: str | None = None
    limit_key: str | None = None
    rate_name: str | None = None
    rate_key: str | None = None
    flow_known = True
    skip_unkeyed = False
    status: str = PENDING
    error: str | None = None


def stored_tasks(tasks: Mapping[str, Any]) -> tuple[dict[str, str], list[str]]:
    """The specs of the declared tasks with a limit or a rate, and the names of the others
    (whose stored specs this deploy removes)."""
    specs: dict[str, str] = {}
    plain: list[str] = []
    for name, task in tasks.items():
        spec = task_spec(task)
        if spec is None:
            plain.append(name)
        else:
            specs[name] = spec
    return specs, plain


def sync(store: Any, tasks: Mapping[str, Any]) -> None:
    """At worker start: store the declared limits and rates and each task's spec (the newest
    deploy wins; rota.limit_specs), let the store key the runs it makes itself (schedule
    ticks, backfills, retries) of the tasks declared here from their code, and give the
    runs made elsewhere that wait unresolved their keys."""
    limits, rates = declared(tasks)
    sync_flow = getattr(store, "sync_flow", None)
    if sync_flow is None:
        return
    sync_flow(limits, rates)
    specs, plain = stored_tasks(tasks)
    store.sync_specs(specs, plain)
    store.flow_stamp = functools.partial(_stamp_stored, dict(tasks))
    if tasks:  # a task declared here without the limit an older deploy gave it is resolved too
        store.flow_resolve = functools.partial(store.resolve_runs, dict(tasks))


def _stamp_stored(tasks: Mapping[str, Any], run: Any) -> None:
    """Stamp a run the store made from stored JSON arguments (a schedule's), if its task is
    declared here (else the store keys it from the stored spec)."""
    task = tasks.get(run.task)
    if task is not None and task.limit_gate is None and task.rate_gate is None:
        run.flow_known = True  # declared here without either: nothing to parse
    elif task is not None:
        _stamp_json(run, task, run.args, run.kwargs)
