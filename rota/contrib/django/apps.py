"""The Django app `rota.contrib.django` (add it to INSTALLED_APPS): management commands
`rota_worker`, `rota_dashboard`, `rota_migrate` and `rota` (any read-only rota command)."""

from __future__ import annotations

from django.apps import AppConfig


class RotaConfig(AppConfig):
    name = "rota.contrib.django"
    label = "rota"
    verbose_name = "rota"

    def ready(self) -> None:
        """After each sync handler, close the handler thread's stale Django connections (a
        worker thread is never a request, and its connections would stay open forever).
        Make the RotaBackend of settings.TASKS now, so a worker's App has the task that runs
        Django tasks (and their schedules) whichever way it was started."""
        from django.conf import settings
        from django.db import close_old_connections

        from ...transactional import AFTER_SYNC_CALL

        if close_old_connections not in AFTER_SYNC_CALL:  # as after each request
            AFTER_SYNC_CALL.append(close_old_connections)

        for alias, spec in (getattr(settings, "TASKS", None) or {}).items():
            if str(spec.get("BACKEND", "")).startswith("rota.contrib.django"):
                from .backend import task_backends

                task_backends[alias]  # registers rota.django.run on the App
