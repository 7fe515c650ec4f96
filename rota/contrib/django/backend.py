"""A Django Tasks backend (DEP 14) that enqueues Django tasks as rota runs.

    TASKS = {"default": {"BACKEND": "rota.contrib.django.RotaBackend", "OPTIONS": {
        "SCHEDULES": {"nightly-report": {"task": "shop.tasks.report", "cron": "0 3 * * *"}},
    }}}

Each enqueue is a run of the rota task `rota.django.run` on the project's App (settings
ROTA["APP"], else an App on Django's database), whose arguments are the Django task's module
path, args and kwargs. Inside `transaction.atomic()` on a database rota shares, the run is
written in that transaction (it exists from the commit on, or never); elsewhere it commits
at once. `get_result` reads the run back as a `TaskResult` (pending -> READY, running ->
RUNNING, succeeded -> SUCCESSFUL, failed/cancelled/skipped -> FAILED). OPTIONS["SCHEDULES"] declares
rota schedules of Django tasks (name -> {"task": module path, "cron"/"every", "args",
"kwargs", and any other `@app.schedule` keyword}).

Django 6 has `django.tasks`; before it (or on Python < 3.12) the `django-tasks` backport.
"""

from __future__ import annotations

from typing import Any

from ...app import App
from ...errors import ConfigurationError, RunNotFound
from ...models import Run
from ...tasks import RunContext
from ...tasks import Task as RotaTask
from . import conf

try:  # Django 6
    from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError
    from django.tasks.exceptions import TaskResultDoesNotExist
except ImportError:  # the django-tasks backport
    from django_tasks import TaskContext, TaskResult, TaskResultStatus, task_backends  # type: ignore[no-redef,unused-ignore]
    from django_tasks.backends.base import BaseTaskBackend  # type: ignore[no-redef,unused-ignore]
    from django_tasks.base import Task, TaskError  # type: ignore[no-redef,unused-ignore]
    from django_tasks.exceptions import TaskResultDoesNotExist  # type: ignore[no-redef,unused-ignore]

__all__ = ["TASK_NAME", "RotaBackend", "run_django_task", "runner", "task_backends"]

TASK_NAME = "rota.django.run"
STATUS = {
    "pending": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "succeeded": TaskResultStatus.SUCCESSFUL,
    "failed": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
    "skipped": TaskResultStatus.FAILED,  # a schedule tick not run (overlap="skip")
}


def runner(app: App) -> RotaTask[..., Any]:
    """The rota task that runs Django tasks on `app` (registered once)."""
    existing = app.tasks.get(TASK_NAME)
    if existing is not None:
        return existing
    return app.task(name=TASK_NAME, pass_context=True)(run_django_task)


def run_django_task(ctx: RunContext, module_path: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """The handler of `rota.django.run`: import the Django task and call it."""
    from django.utils.module_loading import import_string

    task = import_string(module_path)
    if not isinstance(task, Task):
        raise ConfigurationError(f"{module_path} is a {type(task).__name__}, not a Django task (@task)")
    if task.takes_context:
        result = task.get_backend().get_result(ctx.run_id)
        object.__setattr__(result, "status", TaskResultStatus.RUNNING)
        object.__setattr__(result, "worker_ids", (result.worker_ids or ["rota"])[:1] * ctx.attempt)  # context.attempt
        return task.call(TaskContext(task_result=result), *args, **kwargs)
    return task.call(*args, **kwargs)


class RotaBackend(BaseTaskBackend):
    """Django tasks as rota runs: deferred (run_after), prioritized, results kept."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        if "QUEUES" not in params:
            self.queues: set[str] = set()  # any queue name rota accepts
        self.app = conf.get_app()
        self.runner = runner(self.app)
        for name, spec in (self.options.get("SCHEDULES") or {}).items():
            self._declare(name, dict(spec))

    def _declare(self, name: str, spec: dict[str, Any]) -> None:
        if name in self.app.schedules:
            return
        path = spec.pop("task", None)
        if not isinstance(path, str):
            raise ConfigurationError(
                f"TASKS schedule {name!r}: 'task' must be a Django task's module path, got {path!r}"
            )
        args = [path, list(spec.pop("args", ())), dict(spec.pop("kwargs", {}))]
        self.app.schedule(name=name, args=args, **spec)(self.runner)

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        from django.db import connection, transaction
        from django.utils import timezone

        self.validate_task(task)
        options = {"queue": task.queue_name, "priority": task.priority, "run_at": task.run_after}
        arguments = (task.module_path, list(args), dict(kwargs))
        if not transaction.get_autocommit() and self._shares(connection):
            # in the caller's transaction: the run exists from its commit on, or never
            handle = self.runner.options(connection=connection.connection, **options).enqueue(*arguments)
        else:
            handle = self.runner.options(**options).enqueue(*arguments)
        return TaskResult(
            task=task,
            id=handle.id,
            status=TaskResultStatus.READY,
            enqueued_at=timezone.now(),
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )

    def _shares(self, connection: Any) -> bool:
        """Is rota's database Django's database of `connection` (the same URL)?"""
        try:
            return bool(conf.url_of(connection.settings_dict) == self.app.database_url)
        except ConfigurationError:
            return False  # an engine rota does not run on, or SQLite in memory

    def get_result(self, result_id: str) -> TaskResult:
        try:
            return self.to_result(self.app.get_run(result_id))
        except RunNotFound:
            raise TaskResultDoesNotExist(result_id) from None

    def to_result(self, run: Run) -> TaskResult:
        """The TaskResult of a run of `rota.django.run`."""
        if run.task != TASK_NAME or len(run.args) != 3:
            raise TaskResultDoesNotExist(run.id)
        from django.utils.module_loading import import_string

        task = import_string(run.args[0])
        errors = [self._error(a) for a in (*run.history, {"error": run.error}) if a.get("error")]
        result = TaskResult(
            task=task,
            id=run.id,
            status=STATUS.get(run.status, TaskResultStatus.READY),
            enqueued_at=run.created_at,
            started_at=run.started_at,
            finished_at=run.finished_at,
            last_attempted_at=run.started_at,
            args=run.args[1],
            kwargs=run.args[2],
            backend=self.alias,
            errors=errors,
            worker_ids=[run.worker or "rota"] * run.attempt,  # one per attempt started
        )
        if run.status == "succeeded":
            object.__setattr__(result, "_return_value", run.result)
        return result

    @staticmethod
    def _error(attempt: dict[str, Any]) -> TaskError:
        error = attempt["error"]
        path = str(error.get("type") or "Exception")
        path = path if "." in path else f"builtins.{path}"
        return TaskError(exception_class_path=path, traceback=str(error.get("traceback") or error.get("message") or ""))
