"""`python manage.py rota_migrate [OPTIONS]`: `rota migrate` with Django set up (see `--help`)."""

from rota.contrib.django.commands import RotaCommand


class Command(RotaCommand):
    help = "rota migrate, with Django set up and the database of settings.ROTA."
    command = "migrate"
    takes_app = False
