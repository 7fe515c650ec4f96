"""`python manage.py rota COMMAND [OPTIONS]`: any rota command (status, runs, run, schedules,
workers, ...) on the database of settings.ROTA, with Django set up."""

from rota.contrib.django.commands import RotaCommand


class Command(RotaCommand):
    help = "Any rota command (e.g. `manage.py rota status`), on the database of settings.ROTA."
