"""rota: a job scheduler and task queue backed by your database.

Recurring jobs (cron or interval, any time zone) and one-off tasks on any number of worker
processes and hosts: one run per tick, leases with fencing tokens, nothing lost when a worker
dies, a clean shutdown and a complete history. SQLite by default, PostgreSQL across hosts.
"""

from ._version import __version__
from .app import App, ScheduleSpec
from .clock import Clock, FakeClock
from .durable import Parked, Signal, StepError, StepRefused
from .errors import (
    Cancelled,
    ConfigurationError,
    DatabaseError,
    DatabaseRefused,
    DatabaseTransient,
    DatabaseUnavailable,
    LockLost,
    LockUnavailable,
    PermissionDenied,
    RotaError,
    RunNotFound,
    ScheduleNotFound,
    SchemaVersionError,
    SerializationError,
    TaskNotFound,
    TriggerRefused,
    WaitTimeout,
)
from .events import Event
from .limits import Limit, Rate
from .locks import Lease
from .models import (
    CANCELLED,
    FAILED,
    PENDING,
    RUNNING,
    SKIPPED,
    STATUSES,
    SUCCEEDED,
    LockInfo,
    QueueInfo,
    Run,
    ScheduleInfo,
    WorkerInfo,
)
from .signals import SignalRefused, SignalSent
from .tasks import Backoff, RunContext, RunHandle, Task, TaskCall, TaskOptions
from .timing import explain, next_fire_times
from .worker import Worker

__all__ = [
    "CANCELLED",
    "FAILED",
    "PENDING",
    "RUNNING",
    "SKIPPED",
    "STATUSES",
    "SUCCEEDED",
    "App",
    "Backoff",
    "Cancelled",
    "Clock",
    "ConfigurationError",
    "DatabaseError",
    "DatabaseRefused",
    "DatabaseTransient",
    "DatabaseUnavailable",
    "Event",
    "FakeClock",
    "Lease",
    "Limit",
    "LockInfo",
    "LockLost",
    "LockUnavailable",
    "Parked",
    "PermissionDenied",
    "QueueInfo",
    "Rate",
    "RotaError",
    "Run",
    "RunContext",
    "RunHandle",
    "RunNotFound",
    "ScheduleInfo",
    "ScheduleNotFound",
    "ScheduleSpec",
    "SchemaVersionError",
    "SerializationError",
    "Signal",
    "SignalRefused",
    "SignalSent",
    "StepError",
    "StepRefused",
    "Task",
    "TaskCall",
    "TaskNotFound",
    "TaskOptions",
    "TriggerRefused",
    "WaitTimeout",
    "Worker",
    "WorkerInfo",
    "__version__",
    "explain",
    "next_fire_times",
]
