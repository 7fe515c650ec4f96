"""The Django app `rota.contrib.django` (add it to INSTALLED_APPS): management commands
`rota_worker`, `rota_dashboard`, `rota_migrate` and `rota` (any read-only rota command)."""

from __future__ import annotations

from django.apps import AppConfig


class RotaConfig(AppConfig):
    name = "rota.contrib.django"
    label = "rota"
    verbose_name = "rota"

    def ready(self) -> None:
        """Make the RotaBackend of settings.TASKS now, so a worker's App has the task that runs
        Django tasks (and their schedules) whichever way it was started."""
        from django.conf import settings

        for alias, spec in (getattr(settings, "TASKS", None) or {}).items():
            if str(spec.get("BACKEND", "")).startswith("rota.contrib.django"):
                from .backend import task_backends

                task_backends[alias]  # registers rota.django.run on the App
