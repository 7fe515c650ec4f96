"""`python manage.py rota_worker [OPTIONS]`: `rota worker` with Django set up (see `--help`)."""

from rota.contrib.django.commands import RotaCommand


class Command(RotaCommand):
    help = "rota worker, with Django set up and the database of settings.ROTA."
    command = "worker"
    takes_app = True
