"""Flow control declared on tasks: `rota.Limit` (at most N running at once) and `rota.Rate`
(at most N starts in any window of `per`), both enforced by the database for every worker.

    @app.task(limit=3)                                   # 3 runs of this task at once
    @app.task(limit=rota.Limit(1, by="customer_id"))     # 1 at once per customer_id
    @app.task(limit=rota.Limit(10, name="stripe"))       # one pool shared by every task naming it
    @app.task(rate=rota.Rate(100, per=timedelta(minutes=1), by="account_id"))

`by=` names handler parameters (one, or a tuple) or is a callable returning a string, called
with each call's arguments exactly as the handler is (so it takes the handler's parameters);
the key is resolved at enqueue and stored on the run. A
run made where the task is not declared is keyed from the stored declaration
(rota/limit_specs.py). The store's side (the flow claim) is in rota/stores/sqlstore/limits.py.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .errors import ConfigurationError, did_you_mean, shown
from .serialization import check_name

By = str | tuple[str, ...] | Callable[..., str] | None
MAX = 1_000_000


def _check_max(what: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX:
        raise ConfigurationError(f"{what} must be an integer from 1 to {MAX}, got {value!r}")
    return value


def _check_name(what: str, name: object) -> str | None:
    """A pool's name, checked as every other name (one printable line, at most 200 chars)."""
    return None if name is None else check_name(what, name)


def _check_by(what: str, by: object) -> By:
    if by is None or callable(by) or isinstance(by, str):
        return by
    if isinstance(by, (tuple, list)) and by and all(isinstance(b, str) for b in by):
        return tuple(by)
    raise ConfigurationError(
        f"{what} by= must be a parameter name, a tuple of names or a callable returning a string, got {by!r}"
    )


@dataclass(frozen=True, slots=True, init=False)
class Limit:
    """At most `max` runs running at once (from claim to end), per value of `by` if given,
    in the pool `name` (default: the task's own)."""

    max: int
    by: By
    name: str | None

    def __init__(self, max: int, *, by: By = None, name: str | None = None) -> None:
        object.__setattr__(self, "max", _check_max("Limit max", max))
        object.__setattr__(self, "by", _check_by("Limit", by))
        object.__setattr__(self, "name", _check_name("Limit", name))

    @staticmethod
    def coerce(value: object) -> Limit | None:
        if value is None or isinstance(value, Limit):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return Limit(_check_max("limit", value))
        raise ConfigurationError(
            f"limit must be a positive integer or rota.Limit(max, by=..., name=...), got {value!r}"
        )


@dataclass(frozen=True, slots=True, init=False)
class Rate:
    """At most `max` starts in any window of `per` seconds (a timedelta or a number), per
    value of `by` if given, in the pool `name` (default: the task's own). Retries count."""

    max: int
    per: float
    by: By
    name: str | None

    def __init__(self, max: int, *, per: float | timedelta, by: By = None, name: str | None = None) -> None:
        seconds = per.total_seconds() if isinstance(per, timedelta) else per
        if (
            not isinstance(seconds, (int, float))
            or isinstance(seconds, bool)
            or not math.isfinite(seconds)
            or not 0.001 <= seconds <= 366 * 86400
        ):
            raise ConfigurationError(f"Rate per= must be seconds (0.001 to a year) or a timedelta, got {shown(per)}")
        object.__setattr__(self, "max", _check_max("Rate max", max))
        object.__setattr__(self, "per", float(seconds))
        object.__setattr__(self, "by", _check_by("Rate", by))
        object.__setattr__(self, "name", _check_name("Rate", name))

    @staticmethod
    def coerce(value: object) -> Rate | None:
        if value is None or isinstance(value, Rate):
            return value
        raise ConfigurationError(f"rate must be rota.Rate(max, per=..., by=..., name=...), got {value!r}")


KeyFn = Callable[[Sequence[Any], Mapping[str, Any]], str]


@dataclass(frozen=True, slots=True)
class Gate:
    """A task's limit or rate, resolved: its pool's name and how to key a call."""

    name: str
    key: KeyFn


def gate(task: str, fn: Callable[..., Any], spec: Limit | Rate | None, pass_context: bool) -> Gate | None:
    """Resolve `spec` for the task `task` whose handler is `fn`; a `by=` parameter the
    handler lacks fails here, at decoration."""
    if spec is None:
        return None
    what = "limit" if isinstance(spec, Limit) else "rate"
    return Gate(spec.name or task, _key_fn(task, fn, spec.by, pass_context, what))


def _key_fn(task: str, fn: Callable[..., Any], by: By, pass_context: bool, what: str) -> KeyFn:
    if by is None:
        return lambda args, kwargs: ""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())[1 if pass_context else 0 :]
    sig = sig.replace(parameters=params)
    if callable(by) and not isinstance(by, str):
        return _call_key(task, by, what)
    names = (by,) if isinstance(by, str) else tuple(by)
    known = [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    for name in names:
        if name not in known:
            raise ConfigurationError(
                f"{what} by={name!r}: task {task} has no parameter {name!r}{did_you_mean(name, known)}; "
                f"its parameters: {', '.join(known) or '(none)'}"
            )

    def key(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        values = [bound.arguments[n] for n in names]
        return _text(values[0]) if len(values) == 1 else json.dumps(values, sort_keys=True, default=str)

    return key


def _call_key(task: str, by: Callable[..., str], what: str) -> KeyFn:
    shown_by = f"{what} by={getattr(by, '__qualname__', None) or repr(by):.60}"

    def key(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
        try:
            value = by(*args, **kwargs)
        except Exception as exc:  # the caller's mistake, told as one line at enqueue
            raise ConfigurationError(
                f"{shown_by} of task {task} raised {type(exc).__name__}: {exc} for the call "
                f"args={list(args)!r:.80} kwargs={dict(kwargs)!r:.80}; it must return a string for every call"
            ) from exc
        if not isinstance(value, str):
            raise ConfigurationError(f"{shown_by} of task {task} must return a string, got {value!r:.80}")
        return value

    return key


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def stamp(run: Any, task: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """Set a new run's limit and rate names and keys from its task and call arguments."""
    run.flow_known = True
    if task.limit_gate is not None:
        run.limit_name, run.limit_key = task.limit_gate.name, task.limit_gate.key(args, kwargs)
    if task.rate_gate is not None:
        run.rate_name, run.rate_key = task.rate_gate.name, task.rate_gate.key(args, kwargs)


def declared(tasks: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, tuple[int, float]]]:
    """The limits and rates the tasks declare, by pool name; two tasks naming one pool with
    different values fail (ConfigurationError)."""
    limits: dict[str, int] = {}
    rates: dict[str, tuple[int, float]] = {}
    for task in tasks.values():
        lim, rate = task.opts.limit, task.opts.rate
        if lim is not None:
            _same(limits, task.limit_gate.name, lim.max, "limit")
        if rate is not None:
            _same(rates, task.rate_gate.name, (rate.max, rate.per), "rate")
    return limits, rates


def _same(into: dict[str, Any], name: str, value: Any, what: str) -> None:
    if into.setdefault(name, value) != value:
        raise ConfigurationError(f"{what} {name!r} is declared twice with different values: {into[name]} and {value}")
