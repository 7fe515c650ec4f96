"""Integrations with frameworks: `rota.contrib.django` (a Django app, management commands, a
Django Tasks backend and test fixtures)."""
