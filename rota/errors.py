"""One exception root for everything rota raises on purpose.

Messages name the offending value and say what would be valid, so that the person reading a
traceback at 3 a.m. can fix the input without opening the source.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from datetime import timedelta


class RotaError(Exception):
    """Root of every error rota raises deliberately."""


class ConfigurationError(RotaError, ValueError):
    """Bad input caught at decoration, enqueue or start-up time (invalid cron, zone, policy...)."""


class SerializationError(ConfigurationError, TypeError):
    """A value that is not JSON (arguments, results) was given where JSON is required."""


class TaskNotFound(RotaError, LookupError):
    """No task of that name is registered."""


class RunNotFound(RotaError, LookupError):
    """No run has that id."""


class ScheduleNotFound(RotaError, LookupError):
    """No schedule has that name."""


class Cancelled(RotaError):
    """Raised by `RunContext.raise_if_cancelled()` inside a handler asked to stop."""


class TriggerRefused(RotaError):
    """A manual trigger could not start because the schedule's overlap policy forbids it now."""


class WaitTimeout(RotaError, TimeoutError):
    """`RunHandle.wait` gave up before the run reached a final status."""


class DatabaseError(RotaError):
    """The database refused or failed an operation (the driver's error is the __cause__)."""


class DatabaseTransient(DatabaseError):
    """A failure that says nothing about the data and may pass if tried again: a lock wait
    that timed out, a deadlock or serialization failure, a read-only database during a
    failover, a dropped connection. A worker keeps its leases and retries with backoff."""


class DatabaseUnavailable(DatabaseTransient):
    """The database could not be reached (connection refused, reset, or timed out)."""


class DatabaseRefused(DatabaseUnavailable):
    """The server answered and refused the connection for a reason time alone will not fix:
    no such database or role, a wrong password, no pg_hba.conf entry. A worker refuses to
    start on it; a running worker treats it as an outage (someone may be fixing it)."""


class PermissionDenied(DatabaseError):
    """The database user may not do a write rota needs (checked when a worker or migrate starts)."""


class SchemaVersionError(DatabaseError):
    """The database schema is newer than this version of rota understands."""


class LockUnavailable(RotaError):
    """A named lock is held by someone else and did not come free within `wait`."""


class LockLost(RotaError):
    """A held lock expired or was taken over while its holder still thought it owned it."""


def shown(value: object) -> str:
    """A value as an error message names it: a timedelta in seconds (its repr reads
    `timedelta(days=-1, seconds=86399)` for minus one second), an int too long to write by
    its size, anything else by repr."""
    if isinstance(value, timedelta):
        seconds = f"{value.total_seconds():.6f}".rstrip("0").rstrip(".")
        return f"timedelta of {seconds} seconds"
    try:
        return repr(value)
    except ValueError:  # an int past Python's int/str limit (4,300 digits), or a value holding one
        if isinstance(value, int):
            return f"an integer of about {value.bit_length() * 30103 // 100000 + 1} digits"
        return f"a {type(value).__name__} holding an integer too long to show"


def did_you_mean(value: str, choices: Iterable[str]) -> str:
    """' (did you mean 'x'?)' when a close match exists, or a full dotted name ends with
    `value` ('nightly' for 'myapp.jobs.nightly', the name a decorator gives), else ''."""
    options = list(choices)
    close = difflib.get_close_matches(value, options, n=1, cutoff=0.6)
    close = close or sorted(o for o in options if o.endswith("." + value))[:1]
    return f" (did you mean {close[0]!r}?)" if close else ""


def one_of(value: object, choices: Iterable[str], what: str) -> ConfigurationError:
    """The standard error for a word outside a closed set: names the value and the valid words."""
    options = sorted(choices)
    hint = did_you_mean(str(value), options) if isinstance(value, str) else ""
    listed = ", ".join(repr(o) for o in options)
    return ConfigurationError(f"unknown {what} {value!r}{hint}; valid values are {listed}")
