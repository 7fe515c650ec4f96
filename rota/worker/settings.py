"""A worker's settings, validated: arguments first, else the app's defaults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from .. import config
from ..config import MIN_HEARTBEAT, MIN_LEASE, MIN_POLL_INTERVAL, check_seconds
from ..errors import ConfigurationError
from .view import WorkerView

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    concurrency: int
    queues: list[str] | None
    lease: float
    poll_interval: float
    shutdown_timeout: float
    heartbeat_interval: float
    flush_interval: float
    default_timeout: float = 0.0  # 0: none (a run's own timeout= always wins)

    @classmethod
    def build(
        cls,
        view: WorkerView,
        *,
        concurrency: int | None,
        queues: list[str] | tuple[str, ...] | None,
        lease: float | None,
        poll_interval: float | None,
        shutdown_timeout: float | None,
        heartbeat_interval: float | None,
        flush_interval: float,
        default_timeout: float | None = None,
    ) -> WorkerSettings:
        config.check_environment()  # a bad ROTA_* variable stops the start, even if overridden
        lease_s = positive("lease", _or(lease, view.lease), MIN_LEASE)
        heartbeat = positive("heartbeat_interval", _or(heartbeat_interval, lease_s / 3), MIN_HEARTBEAT)
        if heartbeat >= lease_s:
            raise ConfigurationError(f"heartbeat_interval ({heartbeat} s) must be shorter than the lease ({lease_s} s)")
        return cls(
            concurrency=positive_int("concurrency", _or(concurrency, view.concurrency)),
            queues=list(queues) if queues else None,
            lease=lease_s,
            poll_interval=positive("poll_interval", _or(poll_interval, view.poll_interval), MIN_POLL_INTERVAL),
            shutdown_timeout=non_negative("shutdown_timeout", _or(shutdown_timeout, view.shutdown_timeout)),
            heartbeat_interval=heartbeat,
            flush_interval=flush_interval,
            default_timeout=check_seconds("default_timeout", _or(default_timeout, view.default_timeout), 0.0),
        )


def _or(value: T | None, default: T) -> T:
    return value if value is not None else default


def positive(name: str, value: float, low: float) -> float:
    """A number of seconds from `low` to a year (smaller ones only spin the worker)."""
    return check_seconds(name, value, low)


def non_negative(name: str, value: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        raise ConfigurationError(f"{name} must be a number of seconds >= 0, got {value!r}")
    return float(value)


def positive_int(name: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(f"{name} must be a positive integer, got {value!r}")
    return value
