"""JSON in and out of the database. Never pickle: a queue must not execute what an attacker
wrote into a table, so arguments, results and errors are JSON and nothing else."""

from __future__ import annotations

import functools
import inspect
import itertools
import json
import re
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .errors import ConfigurationError, SerializationError

_encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
encode = _encoder.encode
decode = json.loads


# How deep the arguments of a run may nest (lists and objects inside each other). Deeper JSON
# is almost always a bug (a structure that refers to itself, a parser loop), and every reader
# must decode it within Python's recursion limit: the CLI, the dashboard, the worker.
MAX_DEPTH = 100


def _too_deep(where: str) -> SerializationError:
    if len(where) > 80:  # the path to the 100th level: its start names the argument
        where = where[:60] + "..." + where[-12:]
    return SerializationError(
        f"{where} is nested more than {MAX_DEPTH} levels deep (lists and objects inside each other); "
        f"JSON arguments may nest at most {MAX_DEPTH} levels: flatten it or store it elsewhere and pass an id"
    )


def _check(value: Any, where: str, depth: int = 0, limit: int = MAX_DEPTH, ints: bool = False) -> None:
    """Walk `value` and raise naming the first non-JSON part (by its path), or the first part
    nested deeper than `limit`; with `ints`, also an integer too long to write as text."""
    if value is None or isinstance(value, (str, bool, int)):
        if ints and type(value) is int:
            _check_digits(value, where)
        return
    if depth >= limit and isinstance(value, (list, tuple, dict)):
        raise _too_deep(where)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise SerializationError(f"{where} is {value!r}, which JSON cannot represent")
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check(item, f"{where}[{i}]", depth + 1, limit, ints)
        return
    if isinstance(value, dict):
        for k, item in value.items():
            if not isinstance(k, str):
                raise SerializationError(
                    f"{where} has the key {k!r} of type {type(k).__name__}; JSON object keys must be str"
                )
            _check(item, f"{where}[{k!r}]", depth + 1, limit, ints)
        return
    raise SerializationError(
        f"{where} is a {type(value).__module__}.{type(value).__qualname__} ({value!r:.60}), "
        "which is not JSON; pass str, int, float, bool, None, list or dict "
        "(convert dates to ISO strings, objects to ids or dicts)"
    )


def _check_digits(value: int, where: str) -> None:
    """An int Python refuses to write in decimal (more than sys.get_int_max_str_digits(),
    4,300 by default: a guard against quadratic conversions) cannot be stored as JSON."""
    try:
        str(value)
    except ValueError:
        raise SerializationError(too_long(where, value.bit_length() * 30103 // 100000 + 1)) from None


def too_long(where: str, digits: int) -> str:
    """The one line for an integer of about `digits` decimal digits past Python's limit."""
    return (
        f"{where} is an integer of about {digits} digits; JSON integers may have at most "
        f"{sys.get_int_max_str_digits()} digits (Python's limit on int/str conversion): pass it as a string"
    )


def encode_arguments(
    task: str, args: Sequence[Any], kwargs: Mapping[str, Any], fn: Callable[..., Any] | None = None, skip: int = 0
) -> tuple[str, str]:
    """JSON text of a call's arguments, or a SerializationError naming the bad argument:
    positional ones counted from 1, with the parameter's name when `fn` (the handler) is
    given (`skip`: its leading parameters the caller does not pass, e.g. ctx).

    Stricter than json.dumps: a dict key that is not a str is refused rather than silently
    turned into one (the handler would receive {"1": ...} for {1: ...})."""
    for i, arg in enumerate(args):
        if type(arg) not in _SCALARS:
            _check(arg, _positional(task, i, fn, skip))
    for name, arg in kwargs.items():
        if type(arg) not in _SCALARS:
            _check(arg, f"argument {name!r} of {task}()")
    try:
        encoded = _encoder.encode(list(args)), _encoder.encode(dict(kwargs))
    except ValueError:  # an int too long to write (the only ValueError left after the checks)
        for i, arg in enumerate(args):
            _check(arg, _positional(task, i, fn, skip), ints=True)
        for name, arg in kwargs.items():
            _check(arg, f"argument {name!r} of {task}()", ints=True)
        raise
    if not (encoded[0].isascii() and encoded[1].isascii()):
        _check_utf8(task, args, kwargs, fn, skip)
    return encoded


def _positional(task: str, index: int, fn: Callable[..., Any] | None, skip: int) -> str:
    """`argument 2 (email) of shop.send()`: counted from 1, named when the handler says."""
    names = _parameter_names(fn) if fn is not None else ()
    at = index + skip
    name = f" ({names[at]})" if at < len(names) else ""
    return f"argument {index + 1}{name} of {task}()"


class CallSignature:
    """A handler's signature as enqueue calls it (without its first `skip` parameters, e.g.
    ctx; without annotations, for messages), with the range of positional-only calls that
    surely bind (most enqueues: checked without building a binding)."""

    __slots__ = ("fewest", "most", "signature")

    def __init__(self, signature: inspect.Signature, skip: int) -> None:
        parameters = [p.replace(annotation=p.empty) for p in list(signature.parameters.values())[skip:]]
        self.signature = signature.replace(parameters=parameters, return_annotation=signature.empty)
        kinds = [p.kind for p in parameters]
        positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        required_keywords = any(p.kind == p.KEYWORD_ONLY and p.default is p.empty for p in parameters)
        self.fewest = len(positional) + 1 if required_keywords else sum(p.default is p.empty for p in positional)
        self.most = sys.maxsize if inspect.Parameter.VAR_POSITIONAL in kinds else len(positional)


def call_signature(fn: Callable[..., Any], skip: int = 0) -> CallSignature | None:
    """fn's CallSignature, or None when Python cannot say (a builtin)."""
    try:
        return CallSignature(inspect.signature(fn), skip)
    except (TypeError, ValueError):
        return None


def check_call(task: str, call: CallSignature | None, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """Refuse, at enqueue, arguments the handler could not be called with (too many, one
    missing, an unknown keyword): otherwise each such run would fail on a worker."""
    if call is None or (not kwargs and call.fewest <= len(args) <= call.most):
        return
    signature = call.signature
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        given = f"{len(args)} positional argument(s)" + (f" and {', '.join(map(repr, kwargs))}" if kwargs else "")
        raise ConfigurationError(f"{task}{signature} cannot take {given}: {exc}") from None


@functools.lru_cache(maxsize=1024)
def _parameter_names(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The names of fn's parameters that take positional arguments (before any *args)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return ()
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return tuple(itertools.takewhile(lambda n: n, (p.name if p.kind in kinds else "" for p in parameters)))


def _check_utf8(
    task: str, args: Sequence[Any], kwargs: Mapping[str, Any], fn: Callable[..., Any] | None, skip: int
) -> None:
    """Name the argument holding a lone surrogate (text that is not UTF-8: no store keeps it)."""
    try:
        for i, arg in enumerate(args):
            _walk_text(arg, _positional(task, i, fn, skip))
        for name, arg in kwargs.items():
            _walk_text(name, f"an argument name of {task}()")
            _walk_text(arg, f"argument {name!r} of {task}()")
    except ConfigurationError as exc:
        raise SerializationError(str(exc)) from None


def _walk_text(value: Any, where: str) -> None:
    if isinstance(value, str):
        if not value.isascii():
            check_text(where, value, nul=False)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _walk_text(item, f"{where}[{i}]")
    elif isinstance(value, dict):
        for k, item in value.items():
            _walk_text(k, f"a key of {where}")
            _walk_text(item, f"{where}[{k!r}]")


_SCALARS = frozenset({str, int, bool, type(None)})


def check_text(what: str, value: str, *, nul: bool = True) -> str:
    """Refuse text no store can hold: a NUL (PostgreSQL text cannot) or a lone surrogate
    (not UTF-8). Both stores refuse the same, so an app moves between them unchanged."""
    if nul and "\x00" in value:
        raise ConfigurationError(f"{what} {value!r:.80} contains a NUL character (\\x00), which cannot be stored")
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError as exc:
            raise ConfigurationError(
                f"{what} {value!r:.80} contains a lone surrogate {value[exc.start]!r} at {exc.start}, "
                "which is not valid UTF-8 and cannot be stored"
            ) from None
    return value


def encode_result(task: str, value: Any, label: str | None = None) -> str:
    """`value` as JSON text; what is not JSON raises naming it as `label` (by default "the
    result of TASK()") followed by its path in the value."""
    where = label or f"the result of {task}()"
    try:
        return storable(_encoder.encode(value))
    except RecursionError:
        raise SerializationError(
            f"{where} is nested too deeply to store as JSON (lists and objects inside "
            "each other, beyond Python's recursion limit); return something flatter"
        ) from None
    except (TypeError, ValueError):
        _check(value, where, limit=sys.maxsize, ints=True)  # what is not JSON; any depth
        raise  # pragma: no cover


def storable(text: str) -> str:
    """JSON text that every store accepts: a lone surrogate (what `os.fsdecode` gives for
    a non-UTF-8 file name) cannot be encoded as UTF-8, and PostgreSQL's jsonb refuses a NUL
    (`\\u0000`); both are stored escaped, as the visible text `\\udcff` / `\\x00`."""
    if "\\u0000" in text:
        text = _encoder.encode(_escape(json.loads(text)))
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _encoder.encode(_escape(json.loads(text)))
    return text


def _escape(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, list):
        return [_escape(v) for v in value]
    if isinstance(value, dict):
        return {_escape(k): _escape(v) for k, v in value.items()}
    return value


def error_payload(exc: BaseException, *, kind: str | None = None) -> dict[str, Any]:
    """The stored shape of an error: type, message and traceback (all plain text)."""
    return {
        "type": kind or type(exc).__qualname__,
        "message": str(exc) or type(exc).__qualname__,
        "traceback": "".join(traceback.format_exception(exc)),
    }


def encode_error(exc: BaseException, *, kind: str | None = None) -> str:
    return storable(_encoder.encode(error_payload(exc, kind=kind)))


def simple_error(kind: str, message: str) -> str:
    return storable(_encoder.encode({"type": kind, "message": message, "traceback": None}))


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _shown(value: object) -> str:
    """A refused value in an error, whatever its type: its repr cut at 60 characters, with
    its length if it has one (a huge name, bytes or list is never echoed in full)."""
    shown = repr(value)
    if len(shown) <= 60:
        return shown
    try:
        size = len(value)  # type: ignore[arg-type]
    except Exception:  # no length (or a broken __len__): the cut repr says enough
        return f"{shown:.60}..."
    unit = "characters" if isinstance(value, str) else "bytes" if isinstance(value, bytes | bytearray) else "items"
    return f"{shown:.60}... ({size} {unit})"


def check_name(what: str, name: object) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise ConfigurationError(
            f"{what} name must be a non-empty string of at most 200 characters, got {_shown(name)}"
        )
    check_text(f"{what} name", name)
    bad = _CONTROL.search(name)
    if bad is not None:
        raise ConfigurationError(
            f"{what} name {name!r:.80} contains the control character {bad[0]!r} at {bad.start()}: "
            "a name is printable text on one line (no newlines, tabs or escape characters)"
        )
    return name
