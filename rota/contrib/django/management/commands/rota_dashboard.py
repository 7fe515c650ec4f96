"""`python manage.py rota_dashboard [OPTIONS]`: `rota dashboard` with Django set up (see `--help`)."""

from rota.contrib.django.commands import RotaCommand


class Command(RotaCommand):
    help = "rota dashboard, with Django set up and the database of settings.ROTA."
    command = "dashboard"
    takes_app = True
